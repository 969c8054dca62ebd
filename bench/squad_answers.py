"""English answers and refusals on SQuAD 2.0 (four dev articles, `shared/data/squad2-dev-4art`).

The corpus (134 paragraphs) is indexed with the default pipeline; every
question is asked with `rag ask`'s stage (`rag_cli.stages.ask.ask`, the
extractive generator unless `--generator`), in three ways:

* answerable: the 609 questions with gold spans, in the full corpus;
* unanswerable: the 590 questions written to look answerable, in the full corpus;
* removed: each answerable question with its own paragraph masked out of
  the index (what `rag search --filter` does), so its evidence is missing.

Split by article (no paragraph of a test article is seen when tuning):
tune = Computational_complexity_theory + Sky_(United_Kingdom) (305 answerable,
323 unanswerable); test = Southern_California + Victoria_(Australia) (304, 267).

Reported per split: false refusals of answerable questions; of the answered
ones, the share whose answer holds a gold span (SQuAD-normalised
substring) and the median answer length in words (citation markers aside);
SQuAD EM and token F1 over every answerable question (a refusal scores 0)
and over the answered ones; the refused share of the unanswerable and of
the removed questions.

`--record DIR` also writes, per split, answers files recorded with the gate
off (`answers/NAME.parquet` rows, the gate's signals included) for
`rag eval --tune refusal` (`rag_cli.lab.tune_refusal`): answerable and
unanswerable (real unanswerable + removed) questions. `--tune` then fits the
refusal on the tune split and reports the tuned setting too.

    nice python bench/squad_answers.py --work /tmp/squad-answers --out bench/results/squad-answers.json
    nice python bench/squad_answers.py --work /tmp/squad-answers --tune --out bench/results/squad-answers-tuned.json

Retrieval results are kept in WORK/evidence.pkl and sentence vectors in
WORK/vectors.pkl between runs (retrieval does not depend on the generator).
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from _common import commit, machine

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data" / "squad2-dev-4art"
TUNE_ARTICLES = ("Computational_complexity_theory", "Sky_(United_Kingdom)")


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def questions() -> list[dict]:
    """[{id, text, split, paragraph, gold (None: unanswerable)}]."""
    from rag_cli.evaluate.datasets import read_qrels

    qrels = read_qrels(DATA / "qrels" / "test.tsv")
    gold = {a["_id"]: a["answers"] for a in _jsonl(DATA / "answers.jsonl")}
    unans = {u["_id"]: u["paragraph"] for u in _jsonl(DATA / "unanswerable.jsonl")}
    out = []
    for q in _jsonl(DATA / "queries.jsonl"):
        para = next(iter(qrels[q["_id"]])) if q["_id"] in qrels else unans[q["_id"]]
        article = para.rsplit("_", 1)[0]
        out.append({"id": q["_id"], "text": q["text"], "paragraph": para, "gold": gold.get(q["_id"]),
                    "split": "tune" if article in TUNE_ARTICLES else "test"})
    return out


class Cached:
    """`evidence_for` memoised on (question, masked paragraph), kept on disk."""

    def __init__(self, path: Path, real):
        self.path, self.real = path, real
        self.memo = pickle.loads(path.read_bytes()) if path.exists() else {}
        self.key = ""

    def __call__(self, searcher, question, **kw):
        key = (question, self.key, kw.get("k"))
        if key not in self.memo:
            self.memo[key] = self.real(searcher, question, **kw)
        ev, best = self.memo[key]
        return [replace(e) for e in ev], best

    def save(self):
        self.path.write_bytes(pickle.dumps(self.memo))


def setup(work: Path, generator: str = "extractive", options: dict | None = None):
    sys.path.insert(0, str(REPO / "bench"))
    from refusal import build

    import rag_cli.stages.ask as stage

    p = build(work / "squad", DATA / "corpus.jsonl")
    acfg, scfg, s, _, gen = p._ask_setup(dict(generator=generator, **(options or {})), None, None)
    cache = Cached(work / "evidence.pkl", stage.evidence_for)
    stage.evidence_for = cache
    vec_path = work / "vectors.pkl"
    if hasattr(gen, "vectors") and vec_path.exists():
        gen.vectors.update(pickle.loads(vec_path.read_bytes()))
    reranker = p.engines.ask_reranker()
    return p, acfg, scfg, s, gen, cache, vec_path, reranker


def words(text: str) -> int:
    from rag_cli.generate.citations import MARKER

    return len(MARKER.sub(" ", text).split())


def ask_all(qs, s, gen, cfg, scfg, cache, reranker=None, removed: bool = False, progress: str = ""):
    from rag_cli.stages.ask import ask

    doc_ids = np.array(s.chunks.column("doc_id").to_pylist())
    rows = []
    t0 = time.time()
    for i, q in enumerate(qs):
        mask = None
        cache.key = ""
        if removed:
            mask = doc_ids != q["paragraph"]
            cache.key = q["paragraph"]
        res = ask(s, gen, q["text"], cfg, scfg, mask, reranker)
        signals = getattr(res, "signals", None)  # (absent before the per-sentence signals: for a run on an older commit)
        rows.append({"query_id": q["id"], "question": q["text"], "answer": res.answer.text,
                     "support": getattr(res.answer, "support", "") or res.answer.text,
                     "citations": res.answer.citations, "contexts": [e.chunk_id for e in res.evidence],
                     "refused": res.answer.refused, "generator": res.answer.generator, "latency_ms": res.latency_ms,
                     "reason": res.reason, "generator_refused": res.generator_refused,
                     **(signals.to_row() if signals is not None else
                        {"best_score": res.best_score, "coverage": res.coverage,
                         "entity_coverage": res.entity_coverage, "rerank_score": res.rerank_score})})
        if progress and (i + 1) % 100 == 0:
            print(f"  {progress}: {i + 1}/{len(qs)} ({time.time() - t0:.0f}s)", file=sys.stderr, flush=True)
    return rows


def summarise(qs, answerable_rows, unanswerable_rows, removed_rows) -> dict:
    from rag_cli.evaluate.answers import exact_match, f1_score, holds_answer

    gold = {q["id"]: q["gold"] for q in qs}
    answered = [r for r in answerable_rows if not r["refused"]]
    f1 = [0.0 if r["refused"] else f1_score(r["answer_plain"], gold[r["query_id"]]) for r in answerable_rows]
    em = [0.0 if r["refused"] else exact_match(r["answer_plain"], gold[r["query_id"]]) for r in answerable_rows]
    n = max(1, len(answerable_rows))
    return {
        "n_answerable": len(answerable_rows), "n_unanswerable": len(unanswerable_rows),
        "false_refusals": round(sum(r["refused"] for r in answerable_rows) / n, 4),
        "holds_gold_answered": round(sum(holds_answer(r["answer"], gold[r["query_id"]]) for r in answered)
                                     / max(1, len(answered)), 4),
        "support_holds_gold_answered": round(sum(holds_answer(r["support"], gold[r["query_id"]]) for r in answered)
                                             / max(1, len(answered)), 4),
        "median_words_answered": statistics.median([words(r["answer"]) for r in answered]) if answered else None,
        "em": round(sum(em) / n, 4), "f1": round(sum(f1) / n, 4),
        "f1_answered": round(sum(f for f, r in zip(f1, answerable_rows) if not r["refused"]) / max(1, len(answered)), 4),
        "refused_unanswerable": round(sum(r["refused"] for r in unanswerable_rows) / max(1, len(unanswerable_rows)), 4),
        "refused_removed": round(sum(r["refused"] for r in removed_rows) / max(1, len(removed_rows)), 4),
    }


def _plain(rows):
    from rag_cli.generate.citations import MARKER

    for r in rows:
        r["answer_plain"] = MARKER.sub("", r["answer"]).strip()
    return rows


def run(work: Path, cfg_options: dict, splits=("tune", "test"), generator="extractive", limit=None, record=False):
    from rag_cli.store.answers import write_answers

    p, acfg, scfg, s, gen, cache, vec_path, reranker = setup(work, generator)
    acfg = replace(acfg, **cfg_options)
    qs = questions()
    out = {}
    files = {}
    for split in splits:
        part = [q for q in qs if q["split"] == split]
        ans = [q for q in part if q["gold"]][:limit]
        una = [q for q in part if not q["gold"]][:limit]
        runs = {}
        for name, group, removed in (("answerable", ans, False), ("unanswerable", una, False), ("removed", ans, True)):
            runs[name] = _plain(ask_all(group, s, gen, acfg, scfg, cache, reranker, removed, f"{split} {name}"))
            cache.save()
            if hasattr(gen, "vectors"):
                vec_path.write_bytes(pickle.dumps(gen.vectors))
        out[split] = summarise(part, runs["answerable"], runs["unanswerable"], runs["removed"])
        out[split]["rows"] = runs
        if record:
            off = replace(acfg, gate="off")
            for name, groups in (("answerable", [(ans, False)]), ("unanswerable", [(una, False), (ans, True)])):
                rows = [r for g, rm in groups for r in ask_all(g, s, gen, off, scfg, cache, reranker, rm)]
                for r in rows:
                    r.pop("support", None)
                path = work / "recorded" / f"{split}-{name}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                write_answers(path, rows)
                files[split, name] = path
            cache.save()
    return p, out, files


def table(out: dict, title: str) -> str:
    cols = [("false_refusals", "false refusals"), ("holds_gold_answered", "answer holds gold (answered)"),
            ("median_words_answered", "median words"), ("f1", "F1"), ("em", "EM"),
            ("refused_unanswerable", "refused unanswerable"), ("refused_removed", "refused, passage removed")]
    lines = [f"### {title}", "", "| split | " + " | ".join(c[1] for c in cols) + " |",
             "|---|" + "---:|" * len(cols)]
    for split, r in out.items():
        cells = [f"{r[k]:.1%}" if isinstance(r[k], float) and k not in ("median_words_answered", "f1", "em")
                 else f"{r[k]:.3f}" if k in ("f1", "em") else str(r[k]) for k, _ in cols]
        lines.append(f"| {split} ({r['n_answerable']}+{r['n_unanswerable']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--splits", default="tune,test")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--generator", default="extractive")
    ap.add_argument("--set", action="append", default=[], help="ask.KEY=VALUE (json value)")
    ap.add_argument("--tune", action="store_true", help="record with the gate off and tune the refusal on tune")
    ap.add_argument("--max-false-refusal", type=float, default=0.05)
    args = ap.parse_args()
    options = {kv.split("=", 1)[0]: json.loads(kv.split("=", 1)[1]) for kv in args.set}
    splits = tuple(args.splits.split(","))
    t0 = time.time()
    p, out, files = run(args.work, options, splits, args.generator, args.limit, record=args.tune)
    result = {"command": "python bench/squad_answers.py " + " ".join(sys.argv[1:]), "ask_options": options,
              "generator": args.generator, "results": {k: {m: v for m, v in r.items() if m != "rows"}
                                                       for k, r in out.items()}}
    print(table(result["results"], "defaults" if not options else json.dumps(options)))
    if args.tune:
        from rag_cli.config import AskConfig

        p.config.with_options("ask", AskConfig().__dict__)[0].save(p.config_path)
        report, _ = p.tune_refusal(files["tune", "answerable"], files["tune", "unanswerable"],
                                   max_false_refusal=args.max_false_refusal,
                                   test_answers=files["test", "answerable"],
                                   test_unanswerable=files["test", "unanswerable"])
        result["tuning"] = {k: v for k, v in report.items() if k not in ("grid",)}
        tuned = {k: getattr(p.config.ask, k) for k in report["best"]}
        _, out2, _ = run(args.work, {**options, **tuned}, splits, args.generator, args.limit)
        result["tuned"] = {"ask_options": tuned, "results": {k: {m: v for m, v in r.items() if m != "rows"}
                                                            for k, r in out2.items()}}
        print(table(result["tuned"]["results"], "tuned on tune: " + json.dumps(tuned)))
        p.config.with_options("ask", AskConfig().__dict__)[0].save(p.config_path)
    result["seconds"] = round(time.time() - t0, 1)
    result["machine"] = machine()
    result["commit"] = commit()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        (args.work / "rows.json").write_text(json.dumps({k: r["rows"] for k, r in out.items()}, ensure_ascii=False))


if __name__ == "__main__":
    main()
