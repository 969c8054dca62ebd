"""`rag init`, `rag chunk`, `rag embed`, `rag index` and `rag build`: the
commands that build a project. Each parses its flags, makes one call to
`rag_cli.project.Project` and hands the result to `rag_cli.cli.render`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from rag_cli.cli.common import as_dict, emit_json, given, line, progress
from rag_cli.cli import render
from rag_cli.cli.options import (CHUNK, INDEX, LOCK, MODEL, OUTPUT, PROJECT, RAY, FormatOpt, RayCommand, Settings,
                                 options, output)
from rag_cli.cli.root import app

DirArg = Annotated[Optional[Path], typer.Argument(metavar="DIR",
                                                  help="Project folder (default: -p, RAG_PROJECT or ./.rag)")]
SourcesArg = Annotated[list[str], typer.Argument(
    help="Files, folders (recursive) or globs; or a BEIR corpus.jsonl(.gz) with --format beir")]
EncodingOpt = Annotated[Optional[str], typer.Option(
    "--encoding", help="Text encoding of every text file (e.g. gbk, big5, cp1252); default: UTF-8, else detected")]
RollbackOpt = Annotated[bool, typer.Option(
    "--rollback", help="Make the previous index generation current again (as `rag rollback`)")]
BuildSourcesArg = Annotated[list[str], typer.Argument(
    help="Files, folders (recursive) or globs; or a BEIR corpus with --format beir (remembered in rag.toml for "
         "`rag update`)")]

#: The bi-encoder whose tokenizer measures chunk sizes (`rag chunk --model`, `--precision`).
TOKENIZER = Settings("model", "embedder", "precision")


@app.command()
@options(PROJECT, output(quiet="No report line."))
def init(directory: DirArg = None, *, project, json_out, quiet):
    """Write rag.toml with the default config (every key is also a flag).

    An existing rag.toml is kept as it is (and checked). Every key, its
    default and its flag are in the table below.
    """
    from rag_cli.project import Project

    p = Project.open(directory or project)
    cfg, created = p.init()
    if json_out:
        emit_json({"project": str(p.root), "config": cfg.to_dict(), "created": created})
    elif not quiet:
        line(f"{p.config_path}: {'written with the defaults' if created else 'kept (already there)'}")


@app.command()
@options(CHUNK, TOKENIZER, LOCK, PROJECT, OUTPUT)
def chunk(sources: SourcesArg, fmt: FormatOpt = "auto", encoding: EncodingOpt = None, *, opts, project, json_out,
          quiet):
    r"""Load documents and split them into chunks: docs.parquet, chunks.parquet.

    Reads files, folders (recursively) and globs: Markdown, plain text, HTML,
    PDF, DOCX, source code and BEIR `corpus.jsonl`; unknown or binary files
    are skipped with a reason. `--strategy` picks recursive (default), fixed,
    markdown, code, sentence, parent-child or semantic; sizes are in tokens of
    the embedder's tokenizer or `--unit chars`.

    Examples: `rag chunk docs/ --size 256 --overlap 32`;
    `rag chunk corpus.jsonl --strategy parent-child --parent-size 512`.

    Details (formats, decoding, each strategy, small-to-big, PDF and DOCX):
    docs/chunking.md (`rag chunk` in detail).
    """
    from rag_cli.project import Project

    p = Project.open(project)
    with progress(quiet or json_out) as bar:
        summary = as_dict(p.chunk(sources, format=fmt, encoding=encoding, progress=bar, **given(opts)))
    if json_out:
        return emit_json(summary)
    if not quiet:
        cfg = p.config.chunk
        render.chunked(summary, f"{cfg.strategy}, size {cfg.size}, overlap {cfg.overlap} {cfg.unit}",
                       p.chunks_path, p.parents_path)


@app.command(cls=RayCommand)
@options(MODEL, RAY, LOCK, PROJECT, OUTPUT)
def embed(*, opts, ray, project, json_out, quiet):
    """Embed chunks.parquet with an ONNX bi-encoder: embeddings.parquet (only new or changed chunks).

    Vectors are cached by model and text in `PROJECT/cache/vectors/`, so a
    rerun embeds only new or changed chunks and a killed run continues where
    it stopped. Chunks longer than the model's `max_length` are named (or exit
    2 with `--on-truncate error`); a NaN, infinite or zero vector fails the run.

    Examples: `rag embed --threads 2`; `rag embed --precision fp32 --ray`.

    Details (cache, batching, threads, providers, checks): docs/performance.md
    (`rag embed` in detail).
    """
    from rag_cli.project import Project

    p = Project.open(project)
    with progress(quiet or json_out) as bar:
        summary = as_dict(p.embed(ray=ray, progress=bar, **given(opts)))
    if json_out:
        return emit_json(render.without_model(summary))
    if not quiet:
        render.embedded_summary(summary, p.embeddings_path)


@app.command()
@options(INDEX, LOCK, PROJECT, OUTPUT)
def index(rollback_: RollbackOpt = False, *, opts, project, json_out, quiet):
    r"""Build a new generation of index/: hnswlib (cosine) over the embeddings and bm25s over the chunk texts.

    Builds `index/`: `dense/` (hnswlib, cosine space), `sparse/` (bm25s, Lucene
    scoring), `chunks.parquet` (the chunk ids and texts the index was built from)
    and `meta.json` (model fingerprint, parameters). BM25 analysis: CJK runs are
    segmented with jieba; other text is lower-cased, split on `\w\w+`, stripped of
    English stopwords and Snowball-stemmed (identical to `bm25s.tokenize` with
    `stopwords="en"` and PyStemmer on English text). The BM25 text is the embedded
    text (heading path + chunk). Rows of `embeddings.parquet` with NaN/inf or
    zero vectors, or vectors of different sizes, are refused (exit 2, naming the
    chunk ids and sizes; no index is written). Opening an index checks that its
    dense space is cosine.

    `--backend milvus --uri URI` (the milvus extra) also publishes the
    generation to its own Milvus collection (dense vectors and rag-cli's BM25
    weights as sparse vectors) before it becomes current, then points the
    alias `--collection` at it; search, ask, serve and eval then query Milvus,
    with the same results as the local backends. A local file URI (`*.db`)
    runs Milvus Lite in-process: \[scale-out.md](scale-out.md#serving-from-milvus).
    """
    from rag_cli.project import Project

    p = Project.open(project)
    if rollback_:
        from rag_cli.cli.living import rolled_back

        return rolled_back(p.rollback(**given({"wait": opts.get("wait")})), json_out, quiet)
    with progress(quiet or json_out) as bar:
        summary = as_dict(p.index(progress=bar, **given(opts)))
    if json_out:
        emit_json(summary)
    elif not quiet:
        render.indexed(summary, p.index_dir)


@app.command(cls=RayCommand)
@options(CHUNK, MODEL, INDEX, RAY, LOCK, PROJECT, OUTPUT)
def build(sources: BuildSourcesArg, fmt: FormatOpt = "auto", *, opts, ray, project, json_out, quiet):
    """chunk + embed + index in one command under one lock; the sources are remembered for `rag update`.

    Takes the flags of `rag chunk`, `rag embed` and `rag index`. Keep an index
    of a changing folder current while others search it: each write is a new
    index generation switched atomically, one writer at a time (`--wait`),
    `rag update` redoes only what changed, `rag watch` applies each batch of
    file changes as one update. Generations, locking, update semantics,
    filters and cron / systemd recipes: docs/living-index.md.
    """
    from rag_cli.project import Project

    p = Project.open(project)
    with progress(quiet or json_out) as bar:
        out = as_dict(p.build(sources, format=fmt, ray=ray, progress=bar, **given(opts)))
    if json_out:
        return emit_json({stage: render.without_model(as_dict(s)) for stage, s in out.items()})
    if not quiet:
        render.built({stage: as_dict(s) for stage, s in out.items()}, p.index_dir)
