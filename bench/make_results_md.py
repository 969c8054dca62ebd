"""Write docs/results.md from bench/results/*.json: one section per file.

Each section gives the command that produced the file (the JSON's `command`
when it records one; otherwise the command the benchmark docs give, marked
as such), the commit and the CPU where the file records them, and the file's
main numbers as a table. Rerun after adding or replacing a result file:

    python bench/make_results_md.py            # writes docs/results.md
    python bench/make_results_md.py --check    # exit 1 if docs/results.md is stale

Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
OUT = REPO / "docs" / "results.md"

#: Commands of the files that do not record their own: (command, where it is documented).
#: `check_fallbacks` verifies that each command's script is still named in that file.
FALLBACK_COMMANDS = {
    "embed_speed.json": ("python bench/embed_speed.py --n 1000 --budgets 1024 --pairs 200", "docs/performance.md"),
    "embed_speed-n300-contended.json": ("python bench/embed_speed.py", "bench/README.md"),
    "int8-recipes-scifact.json": ("python bench/int8_recipes.py scifact", "docs/performance.md"),
    "int8-recipes-cmrc2018-trial.json": ("python bench/int8_recipes.py cmrc2018-trial", "docs/performance.md"),
    "op_rates.json": ("python bench/op_rates.py", "docs/performance.md"),
}
#: What the fallback leaves out, said next to it.
FALLBACK_NOTES = {
    "embed_speed-n300-contended.json": "with `--n 300 --out bench/results/embed_speed-n300-contended.json`; "
                                       "the other flags were not recorded (n and threads are in the JSON); "
                                       "run while other jobs used the cores",
}


def fmt(v, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.1f}"
        return f"{v:.{digits}f}".rstrip("0").rstrip(".") if v != int(v) else f"{v:.{min(digits, 1)}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def rnd(v, digits: int) -> str:
    """`v` with exactly `digits` decimals (thousands separated), or – for None."""
    return "–" if v is None else f"{v:,.{digits}f}"


def table(header: list[str], rows: list[list], right: set[int] | None = None) -> str:
    right = right if right is not None else set(range(1, len(header)))
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if i in right else "---" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in r) + " |" for r in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- one renderer per kind of file
def pipeline(d: dict) -> str:
    """bench/pipeline.py: stages (time, memory), metrics per mode."""
    out = [f"{d['dataset']}, {d['strategy']} {d['size_tokens']}/{d['overlap_tokens']} tokens, {d['precision']}."]
    stages = d.get("stages", {})
    if stages:
        rows = []
        for name, s in stages.items():
            res = s.get("result") or {}
            what = ""
            if "n_chunks" in res:
                what = f"{res['n_chunks']:,} chunks"
            rows.append([name, s.get("seconds"), s.get("peak_rss_mib"), what])
        out.append(table(["stage", "seconds", "peak RSS MiB", ""], rows, {1, 2}))
    metrics = d.get("metrics", {})
    if metrics:
        keys = ["ndcg@10", "recall@10", "recall@100", "mrr@10"]
        out.append(table(["mode", "nDCG@10", "Recall@10", "Recall@100", "MRR@10"],
                         [[mode, *(m.get(k) for k in keys)] for mode, m in metrics.items()]))
    return "\n\n".join(out)


def chunking(d: dict) -> str:
    out = [f"{d['docs']:,} documents, {d['normalised_mb']} MB of normalised text ({d['corpus']}); "
           f"{d['size_chars']}/{d['overlap_chars']} characters, {d['size_tokens']}/{d['overlap_tokens']} tokens; "
           f"best of {d['repeats']}; same chunks as LangChain: {fmt(d['same_chunks'])}; "
           f"langchain-text-splitters {d['langchain_text_splitters']}."]
    out.append(table(["splitter", "unit", "seconds", "chunks", "MB/s", "chunks/s", "× LangChain"],
                     [[name, r["unit"], r["seconds"], r["chunks"], r["mb_per_s"], r["chunks_per_s"],
                       r["speedup_vs_langchain"]] for name, r in d["rows"].items()], {2, 3, 4, 5, 6}))
    return "\n\n".join(out)


def embed_speed(d: dict) -> str:
    out = [f"{d['n']:,} SciFact passages ({d['tokens_mean']:.0f} tokens mean, {d['tokens_max']} max), "
           f"{d['threads']} threads; numpy sgemm {d['sgemm_gflops_start']:.1f} → {d['sgemm_gflops_end']:.1f} GFLOP/s; "
           f"load average {d['load_before']:.2f} → {d['load_after']:.2f}."]
    out.append(table(["run", "passages/s", "tokens/s", "useful GFLOP/s", "% of sgemm", "× ST", "cosine to ST"],
                     [[r["name"], *(rnd(r.get(k), n) for k, n in (("passages_per_s", 2), ("tokens_per_s", 0),
                                                                  ("useful_gflops", 1), ("pct_of_sgemm", 0),
                                                                  ("speedup_vs_st", 2), ("cosine_to_st_mean", 4)))]
                      for r in d["rows"]]))
    ce = d.get("cross_encoder")
    if ce:
        out.append(f"Cross-encoder ({ce['layers']} layers, hidden {ce['hidden']}, {ce['pairs']} pairs): "
                   f"fp32 {ce['fp32_pairs_per_s']:.2f} pairs/s, int8 {ce['int8_pairs_per_s']:.2f} pairs/s.")
    return "\n\n".join(out)


def op_rates(d: dict) -> str:
    out = [f"onnxruntime {d['onnxruntime']}, one thread; numpy sgemm {d['sgemm_1_thread_gflops']:.1f} GFLOP/s."]
    rows = []
    for s in d["shapes"]:
        lin = s["linear_gflops"]
        core = s["core_gflops"]
        rows.append([f"{s['batch']} × {s['length']}", ", ".join(f"{lin[k]:.0f}" for k in ("qkv", "out", "up", "down")),
                     *(f"{core[k]:.1f}" for k in ("qattention", "mha_no_mask", "unfused")),
                     f"{100 * s['core_share_of_layer_matmuls']:.0f}%"])
    out.append(table(["batch × tokens", "int8 linear GFLOP/s (qkv, out, up, down)", "QAttention core",
                      "MultiHeadAttention", "MatMul-Softmax-MatMul", "core's share"], rows, {2, 3, 4, 5}))
    return "\n\n".join(out)


def int8_recipes(d: dict) -> str:
    out = [f"{d['dataset']}: {d['chunks']:,} chunks, {d['queries']:,} queries; exact cosine search; "
           "p: paired randomization test against fp32."]
    rows = []
    for name, r in d["recipes"].items():
        c = r["cosine_to_fp32"]
        rows.append([name, f"{r['graphs']['chunks']} / {r['graphs']['queries']}", rnd(c["chunks_mean"], 5),
                     rnd(c["queries_mean"], 5), rnd(r["ndcg@10"], 4), rnd(r["ndcg@10_minus_fp32"], 4),
                     rnd(r["p_value"], 3)])
    out.append(table(["recipe", "chunks / queries graph", "cosine chunks", "cosine queries", "nDCG@10", "− fp32", "p"],
                     rows, {2, 3, 4, 5, 6}))
    return "\n\n".join(out)


def startup(d: dict) -> str:
    out = [f"Median of {d['runs']} cold processes per command on a project built from `sample_corpus/docs` "
           f"(`bench/startup.py`); load average {fmt(d.get('load_before'), 2)} → {fmt(d.get('load_after'), 2)}."]
    rows = [[f"`{c['argv']}`", c["wall_s_median"], c["peak_rss_mib_median"], c["cpu_s_median"]]
            for c in d.get("commands", [])]
    if rows:
        out.append(table(["command", "wall s", "peak RSS MiB", "CPU s"], rows))
    for mode, p in (d.get("profile") or {}).items():
        parts = [("interpreter start", p["interpreter_start_s"]), ("interpreter exit", p["interpreter_exit_s"]),
                 ("imports", p["imports_s"]), *p["phases_s"].items()]
        parts = [(k, v) for k, v in parts if v >= 0.005]
        out.append(f"Where `{p['argv'].split(' -p ')[0]}` spends its {p['wall_s']:.2f} s: "
                   + ", ".join(f"{k} {v:.2f} s" for k, v in sorted(parts, key=lambda kv: -kv[1])) + ".")
    return "\n\n".join(out)


def cmrc_tables(d: dict) -> str:
    """bench/cmrc_tables.py: one row per step, its command(s) and main numbers."""
    rows = []
    for name, step in d["steps"].items():
        if "command" not in step:
            continue
        r = step.get("result") or {}
        m = r.get("metrics") or {}
        if "ndcg@10" in m:
            main = f"nDCG@10 {m['ndcg@10']:.4f}, Recall@100 {m['recall@100']:.4f}, MAP {m['map']:.4f}"
        elif "f1" in m:
            main = (f"n {r['counts']['n_questions']}, EM {m['em']:.3f}, F1 {m['f1']:.3f}, has-answer "
                    f"{rnd(m['has_answer'], 3)}, refusals {m['refusal_rate']:.3f}")
        elif "ann" in r:
            main = f"first missing {r['counts']['first_missing']}, ANN {r['ann']}"
        elif "best" in r and isinstance(r.get("test"), dict):
            t = r["test"]["comparison"]["metrics"]["ndcg@10"]
            main = (f"best {r['best']}; test nDCG@10 {t['baseline']:.4f} -> {t['run']:.4f} "
                    f"(p rand. {t['p_randomisation']:.3f})")
        elif "perturbations" in r:
            main = "; ".join(f"{k} ({v['n_changed']} changed) nDCG@10 {v['loss']['ndcg@10']:+.4f}"
                             for k, v in r["perturbations"].items())
        elif "all" in r:
            a = r["all"]
            main = (f"n {a['n_questions']}, refused unanswerable {a['refused_unanswerable']}, false refusals "
                    f"{a['false_refusals_answerable']}, gold doc cited {a['gold_doc_cited_answered']}")
        else:
            main = ""
        rows.append([name, "<br>".join(f"`{c}`" for c in step["command"]), main, step.get("seconds")])
    return table(["step", "command", "main numbers", "s"], rows, {3})


def generic(d: dict) -> str:
    rows = [[k, json.dumps(v)[:80]] for k, v in d.items() if k not in ("command", "machine")]
    return table(["key", "value"], rows, set())


def renderer(name: str, d: dict):
    if name.startswith("startup"):
        return startup
    if "stages" in d and "metrics" in d:
        return pipeline
    if name.startswith("chunking"):
        return chunking
    if name.startswith("embed_speed"):
        return embed_speed
    if name.startswith("op_rates"):
        return op_rates
    if name.startswith("int8-recipes"):
        return int8_recipes
    if name.startswith("cmrc2018-trial-tables"):
        return cmrc_tables
    return generic


# --------------------------------------------------------------------------- provenance
def provenance(name: str, d: dict) -> list[str]:
    lines = []
    if d.get("command"):
        lines.append(f"- Command: `{d['command']}`")
    elif name in FALLBACK_COMMANDS:
        cmd, where = FALLBACK_COMMANDS[name]
        note = FALLBACK_NOTES.get(name)
        lines.append(f"- Command (not recorded in the file; from `{where}`): `{cmd}`" + (f", {note}" if note else ""))
    else:
        lines.append("- Command: not recorded")
    if d.get("commit"):
        dirty = " (with uncommitted changes)" if d.get("dirty") else ""
        lines.append(f"- Commit: `{d['commit'][:12]}`{dirty}" + (f" ({d['subject']})" if d.get("subject") else ""))
    m = d.get("machine")
    if isinstance(m, dict) and m.get("cpu_model"):
        simd = ", ".join(f for f in ("avx2", "avx512f", "avx512_vnni") if m.get(f)) or "no AVX2"
        lines.append(f"- CPU: {m['cpu_model']} ({simd}), {m.get('usable_cores', m.get('cores'))} cores"
                     + (f", {m['mem_gib']} GiB" if m.get("mem_gib") else ""))
    elif isinstance(m, dict) and m.get("cpu"):
        simd = ", ".join(f for f in ("avx2", "avx512", "vnni", "amx") if m.get(f)) or "no AVX2"
        cores = f", {m['cores']} cores" if m.get("cores") else ""
        lines.append(f"- CPU: {m['cpu']} ({simd}){cores}, Python {m.get('python', '?')}")
    elif isinstance(m, dict):
        lines.append(f"- Machine: {m.get('cpus', '?')} cores, Python {m.get('python', '?')}, {m.get('platform', '?')} "
                     "(CPU model not recorded)")
    elif m:
        lines.append(f"- Machine: {m} (CPU model not recorded)")
    v = d.get("versions")
    if v:
        lines.append("- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    if d.get("date"):
        lines.append(f"- Date: {d['date']}")
    if d.get("note"):
        lines.append(f"- Note: {d['note']}")
    return lines


def check_fallbacks() -> list[str]:
    problems = []
    for name, (cmd, where) in FALLBACK_COMMANDS.items():
        path = REPO / where
        script = Path(cmd.split()[1]).name
        if not path.exists() or script not in path.read_text(encoding="utf-8"):
            problems.append(f"{name}: {script} is no longer named in {where}")
    return problems


def render() -> str:
    files = sorted(RESULTS.glob("*.json"))
    parts = [
        "# Benchmark results",
        "",
        "<!-- Generated by `python bench/make_results_md.py` from bench/results/*.json; do not edit by hand. -->",
        "",
        "One section per file of `bench/results/`, with the command that produced",
        "it. Speeds depend on the machine: compare them only within one file, or",
        "between files that name the same CPU. The analysis of these numbers is in",
        "[performance.md](performance.md), [models.md](models.md) and [startup.md](startup.md).",
        "",
        table(["file", "command"], [[f"[{f.name}](#{anchor(f.name)})",
                                     f"`{cmd}`" if (cmd := command_of(f.name, json.loads(f.read_text()))) else "–"]
                                    for f in files], set()),
    ]
    for f in files:
        d = json.loads(f.read_text(encoding="utf-8"))
        parts += ["", f"## {f.name}", "", *provenance(f.name, d), "", renderer(f.name, d)(d)]
    return "\n".join(parts) + "\n"


def command_of(name: str, d: dict) -> str | None:
    if d.get("command"):
        return d["command"]
    return FALLBACK_COMMANDS.get(name, (None,))[0]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    return "".join(c for c in heading.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    args = ap.parse_args()
    for p in check_fallbacks():
        print(f"warning: {p}", file=sys.stderr)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            sys.exit(f"{args.out} is stale: run python bench/make_results_md.py")
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"written: {args.out} ({len(list(RESULTS.glob('*.json')))} result files)", file=sys.stderr)


if __name__ == "__main__":
    main()
