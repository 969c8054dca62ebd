"""What a client sends: the bodies of POST /search, /ask and /feedback
(pydantic models, strict: a number where text belongs, or an unknown
field, is a 400 naming the field). They also describe the OpenAPI schema
and the arguments of the MCP tools.

Every option is "not given" when absent or null: rag.toml (or its default)
applies, as for a flag left out of `rag search` / `rag ask`. The values are
checked by the library (the message names the flag and the config key) and
k against the server's `serve.max_k`. The generator and its LLM settings
are the server's (rag.toml): a request cannot point the server at another
LLM or make it send a key elsewhere.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from rag_cli.config import all_settings, setting_info

FilterField = Field(None, description="Filter expressions (AND), e.g. [\"doc_id=guides/*\", \"date>=2025-01-01\"]; "
                                      "see docs/living-index.md")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def setting_field(section: str, key: str, note: str = "") -> tuple[Any, Any]:
    """(type, Field) of the optional request field for config `section.key`, from its `config.setting`:
    its type (None = not given: rag.toml's value), its help (+ `note`) and its limits in the schema
    (`minimum`/`maximum`, or `enum`; checked by the library, whose message names the flag and the key)."""
    info = setting_info(section, key)
    limits = info.limits or ()
    schema = {"enum": list(limits)} if limits and isinstance(limits[0], str) else \
        {name: v for name, v in zip(("minimum", "maximum"), limits) if v is not None}
    return Optional[type(info.default)], Field(None, description=f"{info.help}{note} (config: {info.place}.{key})",
                                               json_schema_extra=schema or None)


def _options(self) -> dict:
    """The config options given (not None): every field but the text, the filter and `stream`."""
    return {k: v for k, v in self.model_dump(exclude={"query", "question", "filter", "stream"}).items()
            if v is not None}


class _SearchBase(_Strict):
    """POST /search: one query; the answer is what `rag search QUERY --json` prints."""

    query: str = Field(description="The query")
    filter: list[str] | str | None = FilterField
    options = _options


class _AskBase(_Strict):
    """POST /ask: one question; the answer is what `rag ask QUESTION --json` prints
    (with `stream`: server-sent events, see docs/serve.md)."""

    question: str = Field(description="The question")
    stream: bool = Field(False, description="Send the answer as server-sent events while it is written")
    filter: list[str] | str | None = FilterField
    options = _options


def _fields(section: str, without: tuple[str, ...] = ()) -> dict[str, tuple[Any, Any]]:
    """`setting_field` of each command-line key of `section` not in `without`, k noting serve.max_k."""
    return {s.key: setting_field(section, s.key, "; at most serve.max_k per request" if s.key == "k" else "")
            for s in all_settings() if s.section == section and s.cli and s.key not in without}


SearchRequest = create_model("SearchRequest", __base__=_SearchBase, __doc__=_SearchBase.__doc__, **_fields("search"))
#: [ask] keys a request cannot set: the generator and prompt are the server's (rag.toml); the others are
#: not served yet.
AskRequest = create_model("AskRequest", __base__=_AskBase, __doc__=_AskBase.__doc__,
                          mode=setting_field("search", "mode"),
                          **_fields("ask", without=("generator", "prompt", "min_entity_coverage", "key_idf",
                                                    "entity_scope", "rerank_candidates", "refusal_scope")))


class FeedbackRequest(_Strict):
    """POST /feedback: a thumbs up or down on an answer (or a search), by the id its response carried."""

    answer_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="The X-Rag-Answer-Id header of the response")
    rating: Literal["up", "down"] = Field(description="up | down")
    comment: str | None = Field(None, max_length=2000, description="Optional free text")
