"""`rag serve`: one process that loads a project once and answers over
HTTP (JSON, server-sent events) and the Model Context Protocol
(docs/serve.md).

- `run`: `serve(project, ...)`, the entry point (settings, collections, keys, signals, uvicorn);
- `server_file`: the server file (serve.toml: collections) and the key file (keys.toml: scoped keys), `--check`;
- `collections`: `Served`, the collections of one server (by name, for a key's `Access`), their health;
- `access`: who may connect (loopback, the API key) and `KeyRing` (the key file, reloaded);
- `service`: `Service`, what every front end calls (limits, one generation per request, the query log);
- `warm`: `WarmEngines`, the loaded models and index, reloaded when a new generation is current; a key's
  scope ANDed into every search's mask; `SharedModels`, one bi-encoder per fingerprint;
- `requests`: the request bodies (pydantic; also the OpenAPI schema);
- `app`: the FastAPI app (routes, errors, API key, body limit, SSE);
- `mcp_tools`: the MCP tools `search` and `ask` and the `rag://status` resource.

FastAPI, uvicorn and mcp are the optional extra `serve`
(`pip install 'rag-cli[serve]'`); nothing here is imported by `rag` unless
`rag serve` runs.
"""

from rag_cli.serve.run import serve

__all__ = ["serve"]
