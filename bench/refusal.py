"""A made-unanswerable benchmark for `rag ask`'s refusal gate.

From the shared data, for CMRC 2018 trial and for SciFact:

* sample `--questions` questions and write the corpus copy without their
  gold documents with `rag_cli.evaluate.unanswerable` (what `rag eval
  make-unanswerable` does; whole documents at a time, so every question
  of a removed CMRC passage is made unanswerable; SciFact: test claims in a
  subset of `--scifact-docs` documents: their cited abstracts, then the
  first others);
* index the full corpus and the copy with the default pipeline (`Project.create`,
  chunk, embed, index; the default model);
* ask every sampled question in both with the configured generator
  (default: extractive) and report, on the tune and test halves (split by
  gold document, seeded) and on all:
  refusals on made-unanswerable questions, false refusals on answerable
  ones, gold document in the cited evidence, answer contains a gold answer
  (CMRC), citation validity (markers removed), latency p50/p95 (ms).

    nice python bench/refusal.py --out bench/results/refusal-gate.json
    nice python bench/refusal.py --work /tmp/refusal --gate off --out bench/results/refusal-before.json

`--generator llama-cpp` asks through the local GGUF (default Gemma 3 270M,
the llm extra) instead of the extractive generator.

`--limit N` asks only the first N sampled questions in the same corpora
(the made-unanswerable corpus still lacks every sampled question's passage).

`--grade llm` has the LLM generator first judge whether the sources
answer (`ask.grade`, CRAG-style); each question then records its grade
("yes" | "no" | "unclear") and the summaries count them.

`--gate none` switches every refusal rule off, so that every question
reaches the generator (to measure `--grade llm` alone); `--max-tokens`
caps an LLM generator's answers (generator.max_tokens).

`--tune` records the answers of each half with the gate off in both
projects and runs `rag eval tune refusal` (`rag_cli.lab.tune_refusal`) on the
tune half for `--max-false-refusal` (default 0.05), scoring the default and
the tuned setting on both halves; `--check-real` then asks the test half
with the tuned setting and counts the decisions equal to the simulated ones:

    nice python bench/refusal.py --tune --work /tmp/refusal-gate --out bench/results/refusal-tune.json

`--set KEY=VALUE` sets an [ask] option for every question (a JSON value; repeatable), e.g.
`--set min_score_en=0.81`: a project kept in `--work` from before that key existed has a rag.toml
whose `min_score` (0.82) the English threshold follows.

`--work` keeps the projects (and the answers recorded by `--tune`) between runs (they are rebuilt only when
missing); `--gate off` asks with the gate's entity rule switched off
(`ask.min_entity_coverage = 0`), the gate of before.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import statistics
import tempfile
from pathlib import Path

from _common import commit, machine
from rag_cli import Project, lab
from rag_cli.config import AskConfig
from rag_cli.evaluate.datasets import read_qrels, read_queries
from rag_cli.evaluate.unanswerable import sample_unanswerable, write_unanswerable
from rag_cli.loaders.normalize import normalize_text

DATA = Path(os.environ.get("RAG_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(path: Path, docs: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return path


def _questions(src: Path, qids: list[str], qrels: dict, with_answers: bool) -> list[tuple]:
    queries = dict(read_queries(src / "queries.jsonl"))
    answers = {a["_id"]: a["answers"] for a in _jsonl(src / "answers.jsonl")} if with_answers else {}
    return [(q, queries[q], {d for d, g in qrels[q].items() if g > 0}, answers.get(q)) for q in qids]


def cmrc_sample(n_questions: int, seed: int, work: Path) -> dict:
    """`rag_cli.evaluate.unanswerable` on the 256 passages: whole passages until `n_questions` questions."""
    src = DATA / "cmrc2018-trial"
    out = write_unanswerable(src / "corpus.jsonl", src / "queries.jsonl", src / "qrels" / "test.tsv",
                             n_questions, work / "cmrc" / "variant", seed=seed)
    qrels = read_qrels(src / "qrels" / "test.tsv")
    return {"docs": _jsonl(src / "corpus.jsonl"), "questions": _questions(src, out["questions"], qrels, True),
            "removed": set(out["removed_docs"]), "variant": work / "cmrc" / "variant"}


def scifact_sample(n_questions: int, n_docs: int, seed: int, work: Path) -> dict:
    """Test claims sampled by `sample_unanswerable`; the corpus is their cited
    abstracts, then the first others, up to `n_docs`; the variant is written
    by `write_unanswerable` from that corpus (the same sample: it depends on
    the qrels and the seed only)."""
    src = DATA / "scifact"
    qrels = read_qrels(src / "qrels" / "test.tsv")
    queries = dict(read_queries(src / "queries.jsonl"))
    _, gold = sample_unanswerable(qrels, n_questions, seed, set(queries))
    gold = set(gold)
    keep = []
    for doc in _jsonl(src / "corpus.jsonl.gz"):
        if doc["_id"] in gold or len(keep) < n_docs - len(gold):
            keep.append(doc)
    corpus = _write(work / "scifact" / "subset.jsonl", keep)
    out = write_unanswerable(corpus, src / "queries.jsonl", src / "qrels" / "test.tsv", n_questions,
                             work / "scifact" / "variant", seed=seed)
    return {"docs": keep, "questions": _questions(src, out["questions"], qrels, False),
            "removed": set(out["removed_docs"]), "variant": work / "scifact" / "variant"}


def build(root: Path, docs: list[dict] | Path) -> Project:
    """The project root/p of `docs` (or of the BEIR corpus file `docs`), reused
    from an earlier run only when it holds exactly those documents."""
    corpus = docs if isinstance(docs, Path) else _write(root / "corpus.jsonl", docs)
    if (root / "p" / "rag.toml").exists() and (root / "p" / "index").exists():
        import pyarrow.parquet as pq

        have = set(pq.read_table(root / "p" / "docs.parquet", columns=["doc_id"]).column("doc_id").to_pylist())
        if have == {d["_id"] for d in _jsonl(corpus)}:
            return Project.open(root / "p")
        shutil.rmtree(root / "p")  # built from another sample
    p = Project.create(root / "p")
    p.chunk([corpus], format="beir")
    p.embed()
    p.index()
    return p


def ask_all(p: Project, questions, options: dict, generator: str = "extractive", llm: dict | None = None) -> list[dict]:
    from rag_cli.stages.ask import ask

    acfg, scfg, s, mask, gen = p._ask_setup({"generator": generator}, None, llm)
    from dataclasses import replace

    acfg = replace(acfg, **options)
    out = []
    for qid, text, gold_docs, gold_answers in questions:
        res = ask(s, gen, text, acfg, scfg, mask)
        cited_docs = {c.split("#")[0] for c in res.answer.citations}
        given_text = normalize_text(" ".join(e.text for e in res.given))
        cited_text = normalize_text(" ".join(e.text for e in res.given if e.chunk_id in res.answer.citations))
        gold_in_evidence = gold_in_cited = None
        if gold_answers:
            gold_in_evidence = any(normalize_text(a) in given_text for a in gold_answers)
            gold_in_cited = any(normalize_text(a) in cited_text for a in gold_answers)
        out.append({"id": qid, "question": text, "refused": res.refused, "reason": res.reason,
                    "answer": res.answer.text, "best_score": round(res.best_score, 4),
                    "coverage": round(res.coverage, 4), "entity_coverage": round(res.entity_coverage, 4),
                    "gold_doc_cited": bool(cited_docs & gold_docs),
                    "gold_answer_in_evidence": gold_in_evidence, "gold_answer_in_cited": gold_in_cited,
                    "support": getattr(res.answer, "support", ""),
                    "answer_contains_gold": (any(normalize_text(a) in normalize_text(res.answer.text)
                                                 for a in gold_answers) if gold_answers else None),
                    "n_citations_removed": res.answer.n_citations_removed,
                    "n_citations": len(res.answer.citations), "grade": res.grade,
                    "latency_ms": round(res.latency_ms, 1)})
    return out


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def summarise(answerable: list[dict], unanswerable: list[dict]) -> dict:
    answered = [r for r in answerable if not r["refused"]]
    lat = [r["latency_ms"] for r in answerable + unanswerable]
    out = {"n_questions": len(answerable),
           "refused_unanswerable": round(sum(r["refused"] for r in unanswerable) / max(1, len(unanswerable)), 4),
           "false_refusals_answerable": round(sum(r["refused"] for r in answerable) / max(1, len(answerable)), 4),
           "gold_doc_cited_answered": round(sum(r["gold_doc_cited"] for r in answered) / max(1, len(answered)), 4),
           "citations_removed": sum(r["n_citations_removed"] for r in answerable + unanswerable),
           "answered_with_citation": round(sum(r["n_citations"] > 0 for r in answered) / max(1, len(answered)), 4),
           "latency_ms_p50": _pct(lat, 0.5), "latency_ms_p95": _pct(lat, 0.95)}
    if any(r["grade"] for r in answerable + unanswerable):
        out["grades_answerable"] = {g: sum(r["grade"] == g for r in answerable) for g in ("yes", "no", "unclear", "")}
        out["grades_unanswerable"] = {g: sum(r["grade"] == g for r in unanswerable)
                                      for g in ("yes", "no", "unclear", "")}  # "": refused by the gate first
    if answered and answered[0]["answer_contains_gold"] is not None:
        out["gold_answer_in_evidence_answered"] = round(
            sum(bool(r["gold_answer_in_evidence"]) for r in answered) / len(answered), 4)
        out["gold_answer_in_cited_answered"] = round(
            sum(bool(r["gold_answer_in_cited"]) for r in answered) / len(answered), 4)
        out["answer_contains_gold_answered"] = round(
            sum(bool(r["answer_contains_gold"]) for r in answered) / len(answered), 4)
    return out


def split(questions, seed: int) -> dict[str, str]:
    """qid -> 'tune' | 'test', by the first gold document (questions of one passage stay together)."""
    docs = sorted({min(g) for _, _, g, _ in questions})
    random.Random(seed + 1).shuffle(docs)
    tune = set(docs[: len(docs) // 2])
    return {q: ("tune" if min(g) in tune else "test") for q, _, g, _ in questions}


def run_set(name: str, sample: dict, work: Path, options: dict, seed: int, generator: str = "extractive",
            limit: int | None = None, llm: dict | None = None) -> dict:
    full = build(work / name / "full", sample["docs"])
    cut = build(work / name / "cut", sample["variant"] / "corpus.jsonl")
    qs = sample["questions"][:limit]
    answerable = ask_all(full, qs, options, generator, llm)
    unanswerable = ask_all(cut, qs, options, generator, llm)
    halves = split(qs, seed)
    report = {"n_docs": len(sample["docs"]), "n_removed": len(sample["removed"])}
    for half in ("tune", "test"):
        ids = {q for q, h in halves.items() if h == half}
        report[half] = summarise([r for r in answerable if r["id"] in ids], [r for r in unanswerable if r["id"] in ids])
    report["all"] = summarise(answerable, unanswerable)
    report["questions"] = [{"half": halves[a["id"]], "answerable": a, "unanswerable": u}
                           for a, u in zip(answerable, unanswerable)]
    return report


def check_real(full: Project, cut: Project, qfile: Path, files: dict, generator: str) -> dict:
    """Ask the test half for real with the tuned setting (copied into the
    made-unanswerable project) and count the decisions equal to the simulated ones."""
    from rag_cli.evaluate.gate_tuning import TUNED, simulate
    from rag_cli.store.answers import read_answers

    best = {k: getattr(full.config.ask, k) for k in TUNED}
    cut.config.with_options("ask", best)[0].save(cut.config_path)
    out = {}
    for kind, p in (("answerable", full), ("unanswerable", cut)):
        real = read_answers(p.ask_queries(qfile, generator=generator, name=f"test-{kind}-tuned")["answers"])
        sim = simulate(read_answers(files["test", kind]).to_pylist(), p.config.ask)
        refused = real.column("refused").to_pylist()
        out[kind] = {"n": len(refused), "real_refused": sum(refused), "simulated_refused": sum(sim),
                     "same_decisions": sum(a == b for a, b in zip(refused, sim))}
    cut.config.with_options("ask", AskConfig().__dict__)[0].save(cut.config_path)
    return out


def tune_set(name: str, sample: dict, work: Path, seed: int, max_false_refusal: float,
             generator: str = "extractive", check: bool = False) -> dict:
    """Record the answers with the gate off (`Project.ask_queries(gate="off")`)
    in both projects, per half, then `rag_cli.lab.tune_refusal` on the tune half,
    scored on the test half: the current (default) and the tuned setting."""
    full = build(work / name / "full", sample["docs"])
    cut = build(work / name / "cut", sample["variant"] / "corpus.jsonl")
    full.config.with_options("ask", AskConfig().__dict__)[0].save(full.config_path)  # "current" = the defaults
    halves = split(sample["questions"], seed)
    files = {}
    for half in ("tune", "test"):
        qfile = _write(work / name / f"queries-{half}.jsonl",
                       [{"_id": q, "text": t} for q, t, _, _ in sample["questions"] if halves[q] == half])
        for kind, p in (("answerable", full), ("unanswerable", cut)):
            name_ = f"{half}-{kind}-gate-off-{generator}"
            files[half, kind] = p.answers_path(name_)
            if not files[half, kind].exists():  # kept in --work, as the projects are
                p.ask_queries(qfile, gate="off", generator=generator, name=name_)
    report = lab.tune_refusal.run(full, files["tune", "answerable"], files["tune", "unanswerable"],
                                  max_false_refusal=max_false_refusal, test_answers=files["test", "answerable"],
                                  test_unanswerable=files["test", "unanswerable"]).to_dict()
    drop = ("answers", "unanswerable", "test_answers", "test_unanswerable", "written_to")
    out = {"n_docs": len(sample["docs"]), "n_removed": len(sample["removed"]),
           "n_questions": len(sample["questions"]), **{k: v for k, v in report.items() if k not in drop}}
    if check:
        out["check_real_ask_test"] = check_real(full, cut, work / name / "queries-test.jsonl", files, generator)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--scifact-questions", type=int, default=100)
    ap.add_argument("--scifact-docs", type=int, default=400)
    ap.add_argument("--sets", default="cmrc,scifact")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--gate", choices=("on", "off", "none"), default="on",
                    help="off: without the entity rule; none: no refusal rule at all (every question reaches "
                         "the generator, e.g. to measure --grade alone)")
    ap.add_argument("--max-tokens", type=int, help="generator.max_tokens of an LLM generator")
    ap.add_argument("--generator", default="extractive", help="extractive | llama-cpp (in-process GGUF) | openai")
    ap.add_argument("--grade", choices=("off", "llm"), default="off", help="ask.grade: llm = the generator "
                    "first judges whether the sources answer (needs an LLM generator)")
    ap.add_argument("--limit", type=int, help="ask only the first N sampled questions (same corpora)")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--tune", action="store_true",
                    help="record with the gate off and tune the gate on the tune half (rag eval tune refusal)")
    ap.add_argument("--max-false-refusal", type=float, default=0.05)
    ap.add_argument("--set", action="append", default=[], help="ask.KEY=VALUE (a JSON value) for every question, "
                    "e.g. min_score_en=0.81 in projects whose rag.toml predates that key")
    ap.add_argument("--check-real", action="store_true",
                    help="--tune: also ask the test half with the tuned setting and compare with the simulation")
    args = ap.parse_args()
    options = {"on": {}, "off": {"min_entity_coverage": 0.0},
               "none": {"min_entity_coverage": 0.0, "min_coverage": 0.0, "min_score": -1.0}}[args.gate]
    if args.grade != "off":
        options["grade"] = args.grade
    options.update({kv.split("=", 1)[0]: json.loads(kv.split("=", 1)[1]) for kv in args.set})
    result = {"command": "python bench/refusal.py " + " ".join(
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(args).items()
        if v is not None and v is not False and v != [] and k not in ("work", "out", "set"))
        + "".join(f" --set {kv}" for kv in args.set),
        "generator": args.generator, "ask_options": options, "sets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        for name in args.sets.split(","):
            sample = (cmrc_sample(args.questions, args.seed, work) if name == "cmrc"
                      else scifact_sample(args.scifact_questions, args.scifact_docs, args.seed, work))
            if args.tune:
                result["sets"][name] = tune_set(name, sample, work, args.seed, args.max_false_refusal,
                                                args.generator, args.check_real)
                print(name, json.dumps({h: result["sets"][name][h] for h in ("best", "train", "test")}, indent=1))
                continue
            result["sets"][name] = run_set(name, sample, work, options, args.seed, args.generator, args.limit,
                                           {"max_tokens": args.max_tokens})
            print(name, json.dumps({h: result["sets"][name][h] for h in ("tune", "test", "all")}, indent=1))
    result["machine"] = machine()
    result["commit"] = commit()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
