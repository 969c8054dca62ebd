"""Scale benchmark: the dense backends (and BM25) at a million chunks on this machine.

Embedding a million texts on 2 cores would take days, so the corpus is
built from real model output (see docs/scale.md, "How the corpus is built"):

1. `real`: SciFact, CMRC 2018 (trial) and SQuAD 2.0 (4 articles) chunked
   with the project defaults (recursive, 256/32 tokens) and embedded with
   the default model (multilingual-e5-small, int8), in projects under
   WORK/real/; the query sets of the same collections (SciFact test and
   train, CMRC, SQuAD) encoded as queries. Cached: a rerun embeds nothing.
2. `corpus --n N`: N synthetic chunks. Each vector is a random convex
   combination of a real chunk vector and two of its 10 nearest real
   neighbours (Dirichlet(10, 1, 1) weights: the source weighs 0.83 on
   average), plus a perturbation along a real difference vector (v_a - v_b
   of two random real chunks, scaled by 0.3), L2-normalised as e5's vectors
   are; these two constants were chosen so that, at the real corpus's size,
   the cosine to the nearest other chunk, of random pairs and of the real
   queries' top 10 match the real vectors' (`corpus_stats`). Each text is
   2-5 distinct sentences, each drawn from the source chunk or one of the
   two neighbours (with the same weights). Written as a contract-valid project folder
   (docs, chunks, embeddings) in WORK/n{N}/base/.
3. `index`: `rag index --backend B [--index-type T]` per backend (the real
   CLI, its wall time and peak RSS), each into its own copy of the project
   (hard links to the base tables).
4. `measure`: per backend, in one warm process: the size on disk, the RSS
   after opening, dense recall@10 against the exact backend, QPS and
   P50/P99 latency of dense, sparse and hybrid search with precomputed real
   query vectors (the searcher a warm server holds), and the cold
   `rag search` of one query (a new process: wall time and peak RSS).

    python bench/scale.py --n 50000                 # everything, small
    python bench/scale.py --n 1000000 --backends hnswlib,faiss-hnsw-sq8,faiss-ivf-pq,exact
    python bench/scale.py --n 1000000 --only measure   # reuse the indexes built

Writes bench/results/scale-n{N}.json (machine(), commit, command, load average).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("RAG_DATA", ROOT.parent / "shared" / "data"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import commit, machine, run_measured  # noqa: E402

#: The real collections: (name, corpus file, query files).
COLLECTIONS = [
    ("scifact", "scifact/corpus.jsonl.gz", ["scifact/queries.jsonl", "scifact/queries-train.jsonl"]),
    ("cmrc", "cmrc2018-trial/corpus.jsonl", ["cmrc2018-trial/queries.jsonl"]),
    ("squad", "squad2-dev-4art/corpus.jsonl", ["squad2-dev-4art/queries.jsonl"]),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------- 1. real vectors
def real_vectors(work: Path) -> dict:
    """Chunk and embed the real collections (cached in WORK/real/NAME/) and
    encode their queries (WORK/real/queries.npy + queries.json)."""
    from rag_cli import Project

    real = work / "real"
    for name, corpus, _ in COLLECTIONS:
        proj = real / name
        if (proj / "embeddings.parquet").exists():
            continue
        log(f"real: chunking and embedding {corpus}")
        p = Project.open(proj) if (proj / "rag.toml").exists() else Project.create(proj)
        p.chunk([DATA / corpus], format="beir")
        last = [0.0]

        def progress(task, done, total):
            if time.time() - last[0] > 60:
                last[0] = time.time()
                log(f"  {task} {done}/{total}")
        p.embed(progress=progress)
    qpath = real / "queries.npy"
    if not qpath.exists():
        from rag_cli.config import Config
        from rag_cli.models.loading import load_embedder
        from dataclasses import asdict

        texts, ids = [], []
        for name, _, files in COLLECTIONS:
            for f in files:
                for r in _read_jsonl(DATA / f):
                    ids.append(f"{name}:{r['_id']}")
                    texts.append(r["text"])
        log(f"real: encoding {len(texts)} queries")
        enc = load_embedder(asdict(Config().model))
        from rag_cli.index.searcher import prepare_query

        vecs = np.concatenate([enc.encode_queries([prepare_query(t) for t in texts[i:i + 256]])
                               for i in range(0, len(texts), 256)]).astype(np.float32)
        (real / "queries.json").write_text(json.dumps({"ids": ids, "texts": texts}, ensure_ascii=False),
                                           encoding="utf-8")
        np.save(qpath, vecs)
    return {"queries": str(qpath)}



# --------------------------------------------------------------------------- 2. the synthetic corpus
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])|(?<=[。！？])")


def sentences(text: str) -> list[str]:
    """A chunk's sentences (English: after . ! ? and a space; Chinese: after 。！？); at least one."""
    parts = [p.strip() for p in _SENT.split(text) if p and p.strip()]
    return parts or [text.strip()]


def load_real(work: Path) -> dict:
    """The real chunks of every collection: ids, doc ids, titles, collection, (n, d) vectors, and their
    sentences (flat list, with each chunk's first sentence and count) with each sentence's token count."""
    import pyarrow.parquet as pq

    from rag_cli.config import Config
    from rag_cli.models.loading import load_embedder_tokenizer
    from dataclasses import asdict

    tok = load_embedder_tokenizer(asdict(Config().model))
    ids, docs, titles, coll, vecs, sents, first, count = [], [], [], [], [], [], [], []
    meta = None
    for name, _, _ in COLLECTIONS:
        proj = work / "real" / name
        ch = pq.read_table(proj / "chunks.parquet", columns=["chunk_id", "doc_id", "text", "title_path"])
        emb = pq.read_table(proj / "embeddings.parquet", columns=["chunk_id", "vector"])
        meta = meta or pq.read_schema(proj / "embeddings.parquet").metadata
        row = {c: i for i, c in enumerate(emb.column("chunk_id").to_pylist())}
        v = np.asarray(emb.column("vector").combine_chunks().flatten(), dtype=np.float32).reshape(emb.num_rows, -1)
        for cid, did, text, tp in zip(*(ch.column(c).to_pylist() for c in ("chunk_id", "doc_id", "text",
                                                                           "title_path"))):
            ss = sentences(text)
            first.append(len(sents))
            count.append(len(ss))
            sents.extend(ss)
            ids.append(cid)
            docs.append(did)
            titles.append((tp or [did])[0])
            coll.append(name)
            vecs.append(v[row[cid]])
    ntok = np.array([len(e.ids) for e in tok.encode_batch(sents, add_special_tokens=False)], dtype=np.int32)
    return {"ids": ids, "docs": docs, "titles": titles, "collection": coll, "vectors": np.stack(vecs),
            "sentences": sents, "first": np.array(first), "count": np.array(count), "ntok": ntok,
            "emb_meta": meta}


def real_neighbours(vectors: np.ndarray, k: int = 10) -> np.ndarray:
    """(n, k) the k nearest other real chunks of each (exact cosine)."""
    from rag_cli.index.backends import top_k_blocks, unit

    u = unit(vectors)
    out = np.zeros((len(u), k), np.int64)
    for start in range(0, len(u), 1024):
        res = top_k_blocks(u, u[start:start + 1024], k + 1)
        for i, (rows, _) in enumerate(res):
            out[start + i] = [r for r in rows if r != start + i][:k]
    return out


def synth_block(real: dict, nbr: np.ndarray, rng: np.random.Generator, size: int,
                alpha=(10.0, 1.0, 1.0), noise: float = 0.3) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """`size` synthetic chunks: (vectors (size, d) unit float32, texts, source real chunk of each, tokens)."""
    from rag_cli.index.backends import unit

    x = real["vectors"]
    n = len(x)
    src = rng.integers(0, n, size)
    pick = np.sort(rng.choice(nbr.shape[1], (size, 2)), axis=1)
    pick[:, 1] += pick[:, 0] == pick[:, 1]  # two different neighbours
    pick[:, 1] %= nbr.shape[1]
    n1, n2 = nbr[src, pick[:, 0]], nbr[src, pick[:, 1]]
    w = rng.dirichlet(alpha, size).astype(np.float32)
    a, b = rng.integers(0, n, size), rng.integers(0, n, size)
    v = w[:, :1] * x[src] + w[:, 1:2] * x[n1] + w[:, 2:] * x[n2] + noise * (x[a] - x[b])
    v = unit(v)
    # texts: 2-5 sentences, each from the source chunk or one of its two neighbours (by the same weights)
    k = rng.integers(2, 6, size)
    texts, ntok = [], np.zeros(size, np.int32)
    sents, first, count, stok = real["sentences"], real["first"], real["count"], real["ntok"]
    which = np.stack([src, n1, n2], axis=1)
    cw = np.cumsum(w, axis=1)
    for i in range(size):
        u = rng.random(k[i])
        chunks = which[i, np.minimum(np.searchsorted(cw[i], u), 2)]
        idx = first[chunks] + (rng.random(k[i]) * count[chunks]).astype(np.int64)
        idx = idx[np.sort(np.unique(idx, return_index=True)[1])]  # a sentence once per chunk
        texts.append(" ".join(sents[j] for j in idx))
        ntok[i] = int(stok[idx].sum())
    return v.astype(np.float32), texts, src, ntok


def make_corpus(work: Path, n: int, seed: int = 2026, per_doc: int = 10) -> Path:
    """WORK/n{N}/base/: a project (rag.toml of the defaults, docs/chunks/embeddings.parquet) of n
    synthetic chunks (see the module doc), `per_doc` chunks per document. Cached."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from rag_cli import Project

    base = work / f"n{n}" / "base"
    if (base / "embeddings.parquet").exists():
        return base
    t0 = time.perf_counter()
    real = load_real(work)
    nbr = real_neighbours(real["vectors"])
    log(f"corpus: {len(real['ids'])} real chunks, {len(real['sentences'])} sentences; writing {n} synthetic")
    tmp = base.with_name("base.tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    Project.create(tmp)
    d = real["vectors"].shape[1]
    rng = np.random.default_rng(seed)
    chunk_schema = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("ordinal", pa.int32()),
                              ("text", pa.string()), ("title_path", pa.list_(pa.string())),
                              ("start_char", pa.int64()), ("end_char", pa.int64()), ("n_tokens", pa.int32()),
                              ("parent_id", pa.string()), ("sha256", pa.string())])
    emb_schema = pa.schema([("chunk_id", pa.string()), ("text_sha256", pa.string()),
                            ("vector", pa.list_(pa.float32(), d)), ("n_tokens", pa.int32()),
                            ("truncated", pa.bool_())], metadata=real["emb_meta"])
    docs = {k: [] for k in ("doc_id", "path", "sha256", "mtime", "n_chars", "title", "metadata")}
    cw = pq.ParquetWriter(tmp / "chunks.parquet", chunk_schema, compression="zstd")
    ew = pq.ParquetWriter(tmp / "embeddings.parquet", emb_schema, compression="zstd")
    block = 100_000 - 100_000 % per_doc
    for start in range(0, n, block):
        size = min(block, n - start)
        v, texts, src, ntok = synth_block(real, nbr, rng, size)
        rows = np.arange(start, start + size)
        doc_ids = [f"syn/{r // per_doc:07d}" for r in rows]
        ords = (rows % per_doc).astype(np.int32)
        starts, ends, shas = np.zeros(size, np.int64), np.zeros(size, np.int64), []
        pos = 0
        for i, t in enumerate(texts):
            if ords[i] == 0:
                pos = 0
            starts[i], ends[i] = pos, pos + len(t)
            pos += len(t) + 2  # the document is its chunks joined by a blank line
            shas.append(hashlib.sha256(t.encode("utf-8")).hexdigest())
        titles = [real["titles"][s] for s in src]
        cw.write_table(pa.table({
            "chunk_id": [f"{dd}#{o}" for dd, o in zip(doc_ids, ords)], "doc_id": doc_ids, "ordinal": ords,
            "text": texts, "title_path": [[t] for t in titles], "start_char": starts, "end_char": ends,
            "n_tokens": ntok, "parent_id": pa.nulls(size, pa.string()), "sha256": shas}, schema=chunk_schema))
        ew.write_table(pa.table({
            "chunk_id": [f"{dd}#{o}" for dd, o in zip(doc_ids, ords)], "text_sha256": shas,
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), d),
            "n_tokens": ntok + 2, "truncated": np.zeros(size, bool)}, schema=emb_schema))
        for i in np.flatnonzero(ords == 0):
            j = int(i)
            last = min(j + per_doc, size)
            doc_text = "\n\n".join(texts[j:last])
            docs["doc_id"].append(doc_ids[j])
            docs["path"].append(f"/synthetic/{doc_ids[j]}.txt")
            docs["sha256"].append(hashlib.sha256(doc_text.encode("utf-8")).hexdigest())
            docs["mtime"].append(0.0)
            docs["n_chars"].append(len(doc_text))
            docs["title"].append(titles[j])
            docs["metadata"].append(json.dumps({"collection": real["collection"][src[j]],
                                                "source": real["ids"][src[j]]}, sort_keys=True, ensure_ascii=False))
        log(f"  corpus {start + size}/{n}")
    cw.close()
    ew.close()
    pq.write_table(pa.table(docs), tmp / "docs.parquet", compression="zstd")
    (tmp / "corpus.json").write_text(json.dumps({
        "n": n, "seed": seed, "per_doc": per_doc, "real_chunks": len(real["ids"]),
        "real_sentences": len(real["sentences"]), "seconds": round(time.perf_counter() - t0, 1)}), encoding="utf-8")
    tmp.rename(base)
    return base


def corpus_stats(work: Path, base: Path, sample: int = 2000, seed: int = 1) -> dict:
    """How the synthetic vectors compare with the real ones: cosine to the nearest other chunk and of
    random pairs (over `sample` chunks), and the real queries' top-1 / top-10 cosines, for the real
    chunks and for the synthetic corpus."""
    import pyarrow.parquet as pq

    from rag_cli.index.backends import top_k_blocks, unit

    out_path = base / "stats.json"
    if out_path.exists():
        return json.loads(out_path.read_text())
    real = load_real_vectors(work)
    syn = base_vectors(base)
    q = np.load(work / "real" / "queries.npy")
    rng = np.random.default_rng(seed)
    qs = q[rng.choice(len(q), min(300, len(q)), replace=False)]

    def stats(x: np.ndarray) -> dict:
        pick = rng.choice(len(x), min(sample, len(x)), replace=False)
        nn = [float(s[1]) for _, s in top_k_blocks(x, unit(np.asarray(x[pick])), 2)]
        a, b = rng.integers(0, len(x), 20000), rng.integers(0, len(x), 20000)
        pairs = np.einsum("ij,ij->i", unit(np.asarray(x[a])), unit(np.asarray(x[b])))
        top = top_k_blocks(x, qs, 10)
        return {"n": int(len(x)), "nn_cosine_mean": float(np.mean(nn)), "nn_cosine_p10": float(np.percentile(nn, 10)),
                "nn_cosine_p90": float(np.percentile(nn, 90)), "random_pair_cosine_mean": float(pairs.mean()),
                "random_pair_cosine_std": float(pairs.std()),
                "query_top1_cosine_mean": float(np.mean([s[0] for _, s in top])),
                "query_top10_cosine_mean": float(np.mean([s[-1] for _, s in top]))}

    out = {"real": stats(unit(real)), "synthetic": stats(syn),
           "synthetic_subset_of_real_size": stats(np.asarray(syn[:len(real)]))}
    out_path.write_text(json.dumps(out, indent=2))
    del pq
    return out


def load_real_vectors(work: Path) -> np.ndarray:
    import pyarrow.parquet as pq

    parts = []
    for name, _, _ in COLLECTIONS:
        emb = pq.read_table(work / "real" / name / "embeddings.parquet", columns=["vector"])
        parts.append(np.asarray(emb.column("vector").combine_chunks().flatten(), np.float32).reshape(emb.num_rows, -1))
    return np.concatenate(parts)


def base_vectors(base: Path) -> np.ndarray:
    """The synthetic corpus's vectors as a memory-mapped (n, d) .npy (written once from embeddings.parquet)."""
    import pyarrow.parquet as pq

    path = base / "vectors.npy"
    if not path.exists():
        from numpy.lib.format import open_memmap

        f = pq.ParquetFile(base / "embeddings.parquet")
        d = f.schema_arrow.field("vector").type.list_size
        out = open_memmap(base / "vectors.tmp.npy", mode="w+", dtype=np.float32, shape=(f.metadata.num_rows, d))
        pos = 0
        for batch in f.iter_batches(batch_size=65536, columns=["vector"]):
            v = np.asarray(batch.column(0).flatten(), np.float32).reshape(batch.num_rows, d)
            out[pos:pos + len(v)] = v
            pos += len(v)
        out.flush()
        del out
        os.replace(base / "vectors.tmp.npy", path)
    return np.load(path, mmap_mode="r")


# --------------------------------------------------------------------------- 3. indexes
#: name -> [index] settings
BACKENDS = {
    "hnswlib": {"backend": "hnswlib"},
    "faiss-hnsw-sq8": {"backend": "faiss", "index_type": "hnsw-sq8"},
    "faiss-ivf-pq": {"backend": "faiss", "index_type": "ivf-pq"},
    "faiss-sq8": {"backend": "faiss", "index_type": "sq8"},
    "exact": {"backend": "exact"},
}


def measured(cmd: list[str]) -> tuple[float, float, str]:
    """`run_measured` of `cmd` through GNU time (`/usr/bin/time -f "%e %M"`): (wall seconds, peak RSS
    in MiB, stdout). Not wait4 here: this process is large (the corpus), and Linux carries the
    parent's RSS high-water mark into a child's ru_maxrss at exec, so a child forked from here would
    report at least this process's peak (every build of the first run read 6,059 MiB)."""
    import shutil
    import tempfile

    time_bin = shutil.which("time") or "/usr/bin/time"
    with tempfile.NamedTemporaryFile("r", suffix=".time") as f:
        _, _, out = run_measured([time_bin, "-f", "%e %M", "-o", f.name, *cmd], env=env())
        seconds, kib = f.read().split()[-2:]
    return float(seconds), int(kib) / 1024, out


def rag_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "rag_cli", *map(str, args)]


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def build_index(work: Path, n: int, name: str) -> dict:
    """`rag index` of the base corpus with backend `name` in its own project (hard links to the base
    tables): wall time and peak RSS of the command, its JSON, the generation's meta. Cached in
    WORK/n{N}/{name}/build.json."""
    import shutil

    from rag_cli.config import Config

    base = work / f"n{n}" / "base"
    proj = work / f"n{n}" / name
    done = proj / "build.json"
    if done.exists():
        return json.loads(done.read_text())
    if proj.exists():
        shutil.rmtree(proj)
    proj.mkdir(parents=True)
    for f in ("chunks.parquet", "embeddings.parquet", "docs.parquet"):
        os.link(base / f, proj / f)
    config, _ = Config.load(base / "rag.toml").with_options("index", BACKENDS[name])
    config.save(proj / "rag.toml")
    flags = [f"--backend {v}" if k == "backend" else f"--index-type {v}" for k, v in BACKENDS[name].items()]
    log(f"index: {name} ({n} chunks)")
    seconds, peak, out = measured(rag_cmd("index", "-p", proj, "--json"))
    from rag_cli.store.index_folder import current_generation

    gen = current_generation(proj / "index")
    meta = json.loads((gen / "meta.json").read_text())
    res = {"backend": name, "settings": BACKENDS[name],
           "command": f"rag index -p PROJECT {' '.join(flags)}",
           "command_run": f"rag index -p {proj.relative_to(ROOT)} --json (the settings in its rag.toml [index])",
           "seconds": round(seconds, 1), "peak_rss_mib": round(peak, 1), "result": json.loads(out),
           "dense_build_seconds": meta["dense"].get("build_seconds"),
           "sparse_build_seconds": meta["sparse"].get("build_seconds"),
           "disk": disk_use(gen), "dense_params": meta["dense"], "load_avg_after": os.getloadavg()}
    done.write_text(json.dumps(res, indent=2))
    return res


def disk_use(gen: Path) -> dict:
    """Bytes on disk of a generation: dense/, sparse/, chunks.arrow, the rest, and the dense files."""
    out = {"dense": 0, "sparse": 0, "chunks": 0, "other": 0, "dense_files": {}}
    for f in gen.rglob("*"):
        if not f.is_file():
            continue
        size = f.stat().st_size
        top = f.relative_to(gen).parts[0]
        key = top if top in ("dense", "sparse") else "chunks" if top.startswith("chunks.") else "other"
        out[key] += size
        if top == "dense":
            out["dense_files"][f.name] = size
    return out


# --------------------------------------------------------------------------- 4. measurements
def ground_truth(work: Path, n: int, qv: np.ndarray, k: int = 10) -> np.ndarray:
    """(q, k) exact top-k rows of each query over the base vectors (the exact backend's search), cached."""
    from rag_cli.index.exact import ExactIndex

    path = work / f"n{n}" / f"gt-q{len(qv)}-k{k}.npy"
    if path.exists():
        return np.load(path)
    vecs = base_vectors(work / f"n{n}" / "base")
    ex = ExactIndex(vecs, {"backend": "exact", "dim": vecs.shape[1], "n": len(vecs)})
    gt = np.stack([r for r, _ in ex.search(qv, k)])
    np.save(path, gt)
    return gt


def proc_mem() -> dict:
    """This process's RSS (MiB): total, anonymous (heap: what the process holds) and file-backed
    (memory-mapped files whose pages were read; the kernel can drop them)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def pct(xs, p) -> float:
    return round(float(np.percentile(np.asarray(xs) * 1000, p)), 2)


def measure_one(work: Path, n: int, name: str, n_queries: int, seed: int = 7) -> dict:
    """In this (fresh) process: open the index of backend `name` and time dense, sparse, hybrid and
    filtered dense searches one query at a time with the real query vectors (as a warm server would)."""
    t_import = time.perf_counter()
    from rag_cli.index.searcher import Searcher

    proj = work / f"n{n}" / name
    q_all = np.load(work / "real" / "queries.npy")
    texts_all = json.loads((work / "real" / "queries.json").read_text(encoding="utf-8"))["texts"]
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(q_all), min(n_queries, len(q_all)), replace=False))
    qv, texts = q_all[pick], [texts_all[i] for i in pick]
    gt = ground_truth(work, n, qv)
    import_s = time.perf_counter() - t_import
    mem0 = proc_mem()
    t0 = time.perf_counter()
    s = Searcher.open(proj / "index", None, proj)
    open_s = time.perf_counter() - t0
    mem1 = proc_mem()
    res = {"backend": name, "n_queries": len(qv), "open_seconds": round(open_s, 3), "import_seconds": round(import_s, 3),
           "mem_before_open_mib": mem0, "mem_after_open_mib": mem1}
    limit = len(qv) if name != "exact" or n <= 100_000 else min(len(qv), 100)

    def run(mode: str, m: int, mask=None):
        lat, hits = [], []
        for i in range(m):
            t = time.perf_counter()
            h = s.search(texts[i], mode=mode, k=10, candidates=100, mask=mask,
                         query_vector=qv[i] if mode != "sparse" else None)
            lat.append(time.perf_counter() - t)
            hits.append(h)
        return lat, hits

    run("dense", min(20, limit))  # warm-up: the first queries page in the graph / codes

    def dense_recall(hits) -> float:
        return round(float(np.mean([len({h.row for h in hh} & set(gt[i].tolist())) / 10
                                    for i, hh in enumerate(hits)])), 4)

    # the search-time settings: recall against speed (index.hnsw_ef; faiss nprobe, rescore)
    sweep = {"hnswlib": [{"ef": e} for e in (64, 128, 256, 512, 1024, 2048)],
             "faiss-hnsw-sq8": [{"ef": e, "rescore": r} for e, r in ((64, 100), (128, 100), (256, 100), (256, 200),
                                                                     (512, 200), (1024, 200), (2048, 400))],
             "faiss-sq8": [{"rescore": r} for r in (0, 100)],
             "faiss-ivf-pq": [{"nprobe": p, "rescore": r} for p, r in ((16, 100), (32, 100), (64, 100), (64, 200),
                                                                      (128, 200), (128, 400))]}.get(name, [])
    defaults = dict(s.dense.params)
    res["sweep"] = []
    for point in sweep:
        s.dense.params.update(point)
        lat, hits = run("dense", limit)
        res["sweep"].append({**point, "recall@10": dense_recall(hits), "qps": round(len(lat) / sum(lat), 1),
                             "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99)})
    s.dense.params.clear()
    s.dense.params.update(defaults)
    for mode in ("dense", "sparse", "hybrid"):
        m = limit if mode != "sparse" else len(qv)
        lat, hits = run(mode, m)
        entry = {"queries": m, "qps": round(m / sum(lat), 1), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
                 "mean_ms": round(float(np.mean(lat)) * 1000, 2)}
        if mode == "dense":
            entry["recall@10"] = dense_recall(hits)
            entry["settings"] = {k: s.dense.params.get(k) for k in ("ef", "nprobe", "rescore") if k in s.dense.params}
        res[mode] = entry
    t = time.perf_counter()
    mask = s.mask("collection=cmrc")
    mask_s = time.perf_counter() - t
    lat, hits = run("dense", min(limit, 200), mask)
    ok = s.docs is not None
    allowed = set(np.flatnonzero(mask).tolist())
    res["filtered_dense"] = {"filter": "collection=cmrc", "allowed_rows": int(mask.sum()),
                             "mask_seconds": round(mask_s, 3), "queries": len(lat), "p50_ms": pct(lat, 50),
                             "p99_ms": pct(lat, 99),
                             "all_hits_allowed": ok and all(h.row in allowed for hh in hits for h in hh),
                             "hits_per_query_min": min(len(hh) for hh in hits)}
    res["mem_after_queries_mib"] = proc_mem()
    return res


def measure_encoding(work: Path, n_queries: int = 200, seed: int = 7) -> dict:
    """In this (fresh) process: the default embedder's latency for one real query at a time (what a
    warm server adds to a dense or hybrid search), and its load time and RSS."""
    from dataclasses import asdict

    from rag_cli.config import Config
    from rag_cli.index.searcher import prepare_query
    from rag_cli.models.loading import load_embedder

    texts = json.loads((work / "real" / "queries.json").read_text(encoding="utf-8"))["texts"]
    rng = np.random.default_rng(seed)
    texts = [texts[i] for i in np.sort(rng.choice(len(texts), n_queries, replace=False))]
    mem0 = proc_mem()
    t0 = time.perf_counter()
    enc = load_embedder(asdict(Config().model))
    enc.encode_queries([prepare_query(texts[0])])
    load_s = time.perf_counter() - t0
    lat = []
    for t in texts:
        t1 = time.perf_counter()
        enc.encode_queries([prepare_query(t)])
        lat.append(time.perf_counter() - t1)
    return {"model": Config().model.embedder, "precision": Config().model.precision, "queries": len(texts),
            "load_and_first_query_seconds": round(load_s, 2), "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99),
            "mean_ms": round(float(np.mean(lat)) * 1000, 2), "mem_before_mib": mem0, "mem_after_mib": proc_mem()}


def drop_cache(folder: Path) -> None:
    """Evict `folder`'s files from the page cache (posix_fadvise DONTNEED; only these files, no root)."""
    for f in folder.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cold_search(proj: Path, query: str, repeats: int = 3, evict: bool = False) -> dict:
    """`rag search QUERY -p PROJ --mode hybrid --json` as a new process `repeats` times: wall seconds and
    peak RSS (MiB) of each; with `evict`, the index generation's files are evicted from the page cache
    before each run (a cold disk cache too)."""
    from rag_cli.store.index_folder import current_generation

    runs = []
    for _ in range(repeats):
        if evict:
            drop_cache(current_generation(proj / "index"))
        seconds, peak, out = measured(rag_cmd("search", query, "-p", proj, "--mode", "hybrid", "-k", "10", "--json"))
        runs.append({"seconds": round(seconds, 3), "peak_rss_mib": round(peak, 1)})
        hits = json.loads(out)
    return {"command": f"rag search {json.dumps(query, ensure_ascii=False)} -p PROJECT --mode hybrid -k 10 --json",
            "evicted_page_cache": evict, "runs": runs,
            "median_seconds": float(np.median([r["seconds"] for r in runs])),
            "max_peak_rss_mib": max(r["peak_rss_mib"] for r in runs), "n_hits": len(hits.get("results", hits))
            if isinstance(hits, dict) else len(hits)}


def small_index_cold(work: Path) -> dict:
    """The cold `rag search` on the real SciFact project (11k chunks, hnswlib), for comparison."""
    proj = work / "real" / "scifact"
    if not (proj / "index").exists():
        measured(rag_cmd("index", "-p", proj, "--json"))
    return {"project": "real SciFact (11,011 chunks, hnswlib)",
            "warm_page_cache": cold_search(proj, "vitamin D deficiency and bone density")}


def write_fixture(work: Path, path: Path, n: int = 1500, n_queries: int = 100, seed: int = 3) -> None:
    """tests/data/e5_scifact_vectors.npz: `n` real SciFact chunk vectors and `n_queries` real SciFact
    query vectors (multilingual-e5-small, int8), stored as int8 (x 127) to keep the file small."""
    real = load_real_vectors(work)[:11011]  # scifact first
    q = np.load(work / "real" / "queries.npy")[:300]
    rng = np.random.default_rng(seed)
    from rag_cli.index.backends import unit

    x = unit(real[np.sort(rng.choice(len(real), n, replace=False))])
    qq = unit(q[np.sort(rng.choice(len(q), n_queries, replace=False))])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, chunks=np.round(x * 127).astype(np.int8), queries=np.round(qq * 127).astype(np.int8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50000, help="synthetic chunks")
    ap.add_argument("--work", type=Path, default=ROOT / "bench" / "out" / "scale")
    ap.add_argument("--backends", default="hnswlib,faiss-hnsw-sq8,faiss-ivf-pq,exact")
    ap.add_argument("--queries", type=int, default=1000, help="real queries measured (exact: 100 above 100k chunks)")
    ap.add_argument("--only", default=None,
                    help="one stage: real | corpus | index | measure | fixture (default: all but fixture)")
    ap.add_argument("--measure-one", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help="default bench/results/scale-n{N}.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.measure_one:
        out = (measure_encoding(args.work) if args.measure_one == "encoding" else
               measure_one(args.work, args.n, args.measure_one, args.queries))
        print(json.dumps(out))
        return
    if args.only == "fixture":
        write_fixture(args.work, ROOT / "tests" / "data" / "e5_scifact_vectors.npz")
        return
    names = [b for b in args.backends.split(",") if b]
    out_path = args.out or ROOT / "bench" / "results" / f"scale-n{args.n}.json"
    report = json.loads(out_path.read_text()) if out_path.exists() else {}
    report.update({"command": "python bench/scale.py " + " ".join(sys.argv[1:]), "commit": commit(),
                   "machine": machine(), "n": args.n})
    report.setdefault("load_avg", {})["start"] = os.getloadavg()
    if args.only in (None, "real"):
        real_vectors(args.work)
    if args.only in (None, "corpus"):
        base = make_corpus(args.work, args.n)
        report["corpus"] = json.loads((base / "corpus.json").read_text())
        report["corpus_stats"] = corpus_stats(args.work, base)
    if args.only in (None, "index"):
        report.setdefault("build", {})
        for name in names:
            report["build"][name] = build_index(args.work, args.n, name)
            out_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    if args.only in (None, "measure"):
        q_all = np.load(args.work / "real" / "queries.npy")
        rng = np.random.default_rng(7)  # the queries measure_one picks
        ground_truth(args.work, args.n, q_all[np.sort(rng.choice(len(q_all), min(args.queries, len(q_all)),
                                                                 replace=False))])
        report.setdefault("search", {})
        report.setdefault("cold", {})
        query = json.loads((args.work / "real" / "queries.json").read_text(encoding="utf-8"))["texts"][0]
        for name in names:
            log(f"measure: {name}")
            seconds, peak, out = measured([sys.executable, __file__, "--n", str(args.n), "--work", str(args.work),
                                           "--queries", str(args.queries), "--measure-one", name])
            report["search"][name] = {**json.loads(out), "process_peak_rss_mib": round(peak, 1)}
            proj = args.work / f"n{args.n}" / name
            report["cold"][name] = {"warm_page_cache": cold_search(proj, query),
                                    "cold_page_cache": cold_search(proj, query, evict=True)}
            report["load_avg"][f"after {name}"] = os.getloadavg()
            out_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
        if "small_index" not in report:
            report["small_index"] = small_index_cold(args.work)
        if "query_encoding" not in report:
            _, _, out = measured([sys.executable, __file__, "--work", str(args.work), "--measure-one", "encoding"])
            report["query_encoding"] = json.loads(out)
    report["load_avg"]["end"] = os.getloadavg()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    log(f"wrote {out_path}")


if __name__ == "__main__":
    main()
