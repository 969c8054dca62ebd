"""How the reports of `rag models` (list, info, verify, quantize, pull) are
printed: one line per fact, verbatim (paths and names stay greppable)."""

from __future__ import annotations

from rag_cli.cli.common import line, stderr
from rag_cli.cli.render import size


def listing(res: dict) -> None:
    """`rag models list`: the cache, the default models, the pulled ones, the project's."""
    c = res["cache"]
    line(f"cache: {c['path']} ({size(c['bytes'])})")
    line("defaults:")
    for d in res["defaults"]:
        state = "converted" if d["converted"] else ("not converted yet" if d["installed"] else "packages missing")
        line(f"  {d['name']}  {d['kind']}  {state}  [{', '.join(d['precisions']) or '-'}]  {d['path']}")
    if res["cached"]:
        line("pulled:")
        for m in res["cached"]:
            line(f"  {m['name']}  [{', '.join(m['precisions']) or '-'}]  {size(m['bytes'])}  {m['path']}")
    pr = res["project"]
    if pr:
        line(f"project {pr['path']}:")
        for role in ("embedder", "reranker"):
            w = pr[role]
            extra = f" ({pr['precision']})" if role == "embedder" else ""
            line(f"  {role}  {w['value'] or '-'}{extra}  {w['status']}  {w['path'] or ''}")


_INFO_KEYS = ["name", "path", "kind", "kind_source", "dim", "n_logits", "max_length", "pooling", "pooled_in_graph",
              "normalize", "query_prefix", "passage_prefix", "onnx_file", "query_onnx_file", "precision",
              "fingerprint"]


def info(res: dict) -> None:
    """`rag models info`: one `key value` line per fact, the graph's inputs and outputs, its files, warnings."""
    for k in _INFO_KEYS:
        if res.get(k) is not None:
            line(f"{k:15} {res[k]!r}" if isinstance(res[k], str) and k.endswith("prefix") else f"{k:15} {res[k]}")
    for k in ("inputs", "outputs"):
        shown = ", ".join(f"{v['name']} {v['type'].lower()} {v['shape']}" for v in res[k])
        line(f"{k:15} {shown}")
    for f in res["onnx_files"]:
        role = f"  (query graph of {f['query_graph_of']})" if f.get("query_graph_of") else ""
        line(f"{'file':15} {f['path']}  {f['precision']}  {size(f['bytes'])}{role}")
    for w in res["warnings"]:
        stderr().print(f"[yellow]warning:[/] {w}", highlight=False)


def verified(res: dict) -> None:
    """`rag models verify`: the model, then each language's relevant and irrelevant scores."""
    queries = f", queries on {res['query_onnx_file']}" if res.get("query_onnx_file") else ""
    line(f"{res['name']} ({res['kind']}, {res['onnx_file']}, {res['precision']}{queries}): {res['score']}s")
    for c in res["checks"]:
        mark = "ok" if c["ok"] else "FAIL"
        line(f"  {c['lang']}  relevant {c['relevant_score']:.4f}  irrelevant {c['irrelevant_score']:.4f}  "
             f"{mark}  ({c['query']})")


def quantized(res: dict) -> None:
    """`rag models quantize` on stderr: sizes, MatMuls kept in float32, agreement with float32."""
    a = res["agreement"]
    stderr().print(
        f"{res['onnx_file']}: {size(res['bytes_fp32'])} -> {size(res['bytes_int8'])} "
        f"({len(res['fp32_matmuls'])} MatMuls kept in float32)"
        + (f", query graph {res['query_onnx_file']}" if res.get("query_onnx_file") else "")
        + f"; {a['metric']}: {a['value']:.4f} -> {res['path']}",
        highlight=False, markup=False,
    )
    if "shadowed_by" in res:
        stderr().print(f"note: --precision int8 picks {res['shadowed_by']} in this folder, not {res['onnx_file']}; "
                       "use --out DIR for a folder of its own", highlight=False, markup=False)


def pulled(res: dict) -> None:
    """`rag models pull` on stderr: the files, their size and precisions, where they went."""
    stderr().print(f"{res['id']}: {len(res['files'])} files, {size(res['bytes'])}, "
                   f"[{', '.join(res['precisions'])}] -> {res['path']}", highlight=False, markup=False)
