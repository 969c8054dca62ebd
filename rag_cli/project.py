"""The project's pipeline: every operation on a project folder. The CLI is
a thin layer over this class; a Python program uses it directly::

    from rag_cli import Project
    p = Project.open("my.rag")              # or Project.create("my.rag", chunk={"size": 200})
    p.chunk(["docs/"]); p.embed(); p.index()
    hits = p.search("how does RRF work?", mode="hybrid", k=5)
    answer = p.ask("What does ef control?")

The folder itself (paths, rag.toml, manifest.json, the writer lock) is
`p.folder` (`rag_cli.store.folder.ProjectFolder`; its paths and `config`
are also read through `p`); the loaded models and index are `p.engines`
(`rag_cli.engines.Engines`). Evaluation is `rag_cli.lab`.

Options of an operation are its command's flags, as keyword arguments named
after the config keys (`p.index(hnsw_m=16)`, `p.chunk(src, size=200)`;
`model` is the bi-encoder, or the cross-encoder for `rerank`); None means
"not given": the value in rag.toml (or the default) is used. Each option is
checked before any work (BadInput names the flag and the key). `chunk`,
`embed`, `index` and a `rerank` with a new model write the options they
were given back to rag.toml once they have succeeded, so rag.toml stays the
config actually used; `search` and `ask` never change it.

Operations that write the project (chunk, embed, index, build, update,
rollback) hold the project lock from start to end (`ProjectFolder.writing`);
readers (search, ask, status) never take it: they read the index generation
that is current when they open it. Errors: BadInput (exit 2) for bad usage
or input, naming the file, row or flag; WorkFailed (exit 1) otherwise.
Results are typed (`rag_cli.results`), each with `to_dict()`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from rag_cli.config import Config, check_flag, split_options
from rag_cli.engines import Engines, max_length, model_value
from rag_cli.errors import BadInput, Interrupted
from rag_cli.progress import Progress
from rag_cli.results import (AnswersFile, BuildSummary, ChunkSummary, EmbedSummary, IndexSummary, Rollback,
                             RunFile, SearchResult, Status, UpdateSummary)
from rag_cli.store.folder import DEFAULT_PROJECT, ProjectFolder, check_name, file_stem, project_dir

__all__ = ["Project", "SearchResult", "RunFile", "DEFAULT_PROJECT", "project_dir", "check_name", "file_stem"]

#: Keyword options of the pipeline that are not named after their config key.
_RENAMED = {"model": ("model", "embedder")}

#: The flags of `rag eval --judge` that set [ask]/[generator] keys for the judge (named in errors).
JUDGE_FLAGS = {"generator": "--judge-generator", "base_url": "--judge-base-url", "model": "--judge-model",
               "api": "--judge-api"}


def one_of(a_name: str, a: Any, b_name: str, b: Any) -> None:
    """BadInput unless exactly one of two alternative inputs is given (the message says which case)."""
    if a is None and b is None:
        raise BadInput(f"give {a_name} or {b_name}; neither was given")
    if a is not None and b is not None:
        raise BadInput(f"give either {a_name} or {b_name}, not both")


@contextlib.contextmanager
def _chunks_written(command: str) -> Iterator[None]:
    """Turn Ctrl-C / SIGTERM after the chunk step into `Interrupted` saying so."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(f"docs.parquet and chunks.parquet were already replaced (and embeddings.parquet if the "
                          f"embedding had finished); the index is unchanged and still searched; `rag {command}` "
                          "finishes the work (texts already embedded are not embedded again)") from None


def _options(options: dict[str, Any], *sections: str) -> dict[str, dict[str, Any]]:
    """{section: {key: value}} of keyword options (`split_options`), a model folder kept absolute."""
    out = split_options(options, sections, _RENAMED)
    if "model" in out:
        out["model"] = {k: model_value(v) if k in ("embedder", "reranker") and v else v
                        for k, v in out["model"].items()}
    return out


class Project:
    """A project folder and its pipeline. `Project(root, lock_timeout=None)`:
    nothing is created until written; `lock_timeout` is the seconds a writer
    waits for another writer when an operation gets no `wait` (None =
    config `lock.wait`). Reads the folder's paths, `config`, `manifest()`,
    `record()` and `require()` through to `self.folder`."""

    def __init__(self, root: str | os.PathLike, lock_timeout: float | None = None):
        self.folder = ProjectFolder(Path(root), lock_timeout)
        self.engines = Engines(self.folder)

    def __getattr__(self, name: str) -> Any:
        if name in ("folder", "engines") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.folder, name)

    def __repr__(self) -> str:
        return f"Project({str(self.root)!r})"

    # -- opening -------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike | None = None) -> "Project":
        """The project at `path` (else `$RAG_PROJECT`, else `./.rag`); it need not exist yet.
        Raises BadInput when `path` is a file."""
        return cls(ProjectFolder.at(path).root)

    @classmethod
    def create(cls, path: str | os.PathLike | None = None, **sections: Any) -> "Project":
        """A new project whose rag.toml holds the defaults overlaid with
        `sections` (`chunk={"size": 200}`, `model=ModelConfig(...)`, ...).

        Raises BadInput if the folder already has a rag.toml, or for an
        unknown section or key or a bad value (naming it).
        """
        from dataclasses import asdict

        p = cls.open(path)
        if p.config_path.exists():
            raise BadInput(f"{p.config_path} already exists; use Project.open({str(p.root)!r})")
        config = Config()
        for section, values in sections.items():
            if section not in config.to_dict():
                raise BadInput(f"unknown config section {section!r}; known: {', '.join(config.to_dict())}")
            values = asdict(values) if hasattr(values, "__dataclass_fields__") else dict(values)
            if section == "model":
                values = {k: model_value(v) if k in ("embedder", "reranker") and v else v for k, v in values.items()}
            config, _ = config.with_options(section, values)
        with p.folder.writing():
            config.save(p.config_path)
        return p

    def init(self) -> tuple[Config, bool]:
        """Write rag.toml with the defaults unless it exists (an existing one is
        checked and kept). Returns (config, whether it was written)."""
        existed = self.config_path.exists()
        config = self.config
        if not existed:
            with self.folder.writing():
                config.save(self.config_path)
        return config, not existed

    # -- chunk, embed, index -------------------------------------------------
    def chunk(self, sources: Sequence[str | os.PathLike], *, format: str = "auto", encoding: str | None = None,
              wait: float | None = None, progress: Progress | None = None, **options: Any) -> ChunkSummary:
        """Load documents (files, folders, globs; a BEIR corpus with
        format="beir") and split them into chunks: docs.parquet, chunks.parquet
        (see `rag_cli.stages.chunk.chunk_sources`). `options`: [chunk] keys
        (strategy, size, overlap, unit, context_sentences, parent_size,
        breakpoint_percentile), `model` and `precision`. `encoding` forces the
        text files' encoding (None: detected).
        Raises BadInput for bad options, missing sources or no documents."""
        from rag_cli.stages.chunk import chunk_sources

        opts = _options(options, "chunk", "model")
        config = self.folder.with_options("chunk", opts.get("chunk")).with_options("model", opts.get("model"))[0]
        with self.folder.writing("chunk", wait):
            summary = chunk_sources(self.folder, [os.fspath(s) for s in sources], fmt=format, params=config.chunk,
                                    model=config.model, progress=progress, encoding=encoding)
            self.folder.save(*opts.items())
        return ChunkSummary.from_dict(summary)

    def embed(self, *, wait: float | None = None, progress: Progress | None = None,
              **options: Any) -> EmbedSummary:
        """Embed chunks.parquet with the bi-encoder: embeddings.parquet, only
        new or changed texts computed (see `rag_cli.stages.embed.embed_chunks`).
        `options`: [model] keys (`model`, precision, threads, provider,
        on_truncate: what a chunk longer than the model's max_length does).
        Raises BadInput for bad options, a missing model or chunks.parquet,
        or a truncated chunk with on_truncate="error"."""
        from rag_cli.stages.embed import embed_chunks

        self.require(self.chunks_path, "chunk")
        opts = _options(options, "model")
        config = self.folder.with_options("model", opts.get("model"))
        encoder = self.engines.embedder(config)  # checks every option before rag.toml records it
        with self.folder.writing("embed", wait):
            summary = embed_chunks(self.folder, encoder, progress, on_truncate=config.model.on_truncate)
            self.folder.save(*opts.items())
        return EmbedSummary.from_dict({**summary, "model": encoder.folder.name})

    def index(self, *, wait: float | None = None, progress: Progress | None = None,
              **options: Any) -> IndexSummary:
        """Build a new generation of index/: HNSW (cosine) over the embeddings
        and BM25 over the chunk texts (see `rag_cli.stages.index.build_index`),
        keeping `keep` older generations. `options`: [index] keys."""
        from rag_cli.stages.index import build_index

        opts = _options(options, "index")
        config = self.folder.with_options("index", opts.get("index"))
        self.require(self.chunks_path, "chunk")  # before the lock, which would create the folder
        self.require(self.embeddings_path, "embed")
        with self.folder.writing("index", wait):
            summary = build_index(self.folder, config.index, threads=config.model.threads, progress=progress,
                                  keep=config.index.keep)
            self.folder.save(*opts.items())
        return IndexSummary.from_dict(summary)

    # -- build, update, rollback, status ---------------------------------------
    def build(self, sources: Sequence[str | os.PathLike], *, format: str = "auto", wait: float | None = None,
              progress: Progress | None = None, **options: Any) -> BuildSummary:
        """`chunk`, `embed` and `index` under one lock, with the same options
        (keys of [chunk], [model] and [index]); the sources (as absolute
        paths) and `format` are remembered in rag.toml `[sources]` for `update`."""
        split = split_options(options, ("chunk", "model", "index"), _RENAMED)  # unknown options fail first
        model = {("model" if k == "embedder" else k): v for k, v in split.get("model", {}).items()}
        sources = [os.path.abspath(os.fspath(s)) for s in sources]
        with self.folder.writing("build", wait):
            c = self.chunk(sources, format=format, progress=progress, **split.get("chunk", {}),
                           **{k: v for k, v in model.items() if k in ("model", "precision")})
            with _chunks_written("build SRC..."):
                e = self.embed(progress=progress, **{k: v for k, v in model.items() if k not in ("model", "precision")})
                i = self.index(progress=progress, **split.get("index", {}))
            self.folder.save(("sources", {"paths": sources, "format": format}))
        return BuildSummary(c, e, i)

    def update(self, *, keep: int | None = None, wait: float | None = None,
               progress: Progress | None = None) -> UpdateSummary:
        """Rescan the sources remembered by `build`, rechunk new and changed
        documents, embed only new texts and write a new index generation
        updated in place (see `rag_cli.stages.update`). A change of the chunk
        settings rechunks everything; another embedder or HNSW M /
        ef_construction rebuilds the index (`index.full` says why).
        Also recorded in manifest.json under `update`.
        Raises BadInput when no sources are remembered (run `build` first)."""
        from rag_cli.chunking.setup import chunk_settings
        from rag_cli.stages.embed import embed_chunks
        from rag_cli.stages.update import add_pending, pending_counts, update_chunks, update_index

        f = self.folder
        config = f.with_options("index", {"keep": keep})
        src = config.sources
        if not src.paths:
            raise BadInput(f"{f.config_path} remembers no sources ([sources] paths): run "
                           f"`rag build SRC...` first (project folder {f.root})")
        with f.writing("update", wait):
            previous = f.manifest().get("chunk", {}).get("params")
            settings = chunk_settings(config.chunk, config.model, src.format)
            rechunk = None if previous == settings else (
                "the chunk settings changed" if previous else "no earlier chunk settings recorded")
            pending = pending_counts(f)
            c = update_chunks(f, list(src.paths), fmt=src.format, params=config.chunk, model=config.model,
                              full=rechunk is not None, progress=progress)
            c = add_pending(c, pending)
            with _chunks_written("update"):
                e = embed_chunks(f, self.engines.embedder(config), progress)
                i = update_index(f, config.index, threads=config.model.threads, keep=config.index.keep,
                                 progress=progress)
            f.record("update", chunk={k: v for k, v in c.items() if k not in ("skipped", "seconds")},
                     n_embedded=e["n_embedded"], index={k: v for k, v in i.items() if k != "seconds"},
                     full_rechunk=rechunk)
        return UpdateSummary(c, EmbedSummary.from_dict(e), IndexSummary.from_dict(i), rechunk)

    def watch(self, sources: Sequence[str | os.PathLike] = (), *, debounce: float = 2.0, format: str = "auto",
              keep: int | None = None, wait: float | None = None, stop=None, on_start=None, on_batch=None,
              on_update=None, on_error=None, progress: Progress | None = None, **options: Any) -> int:
        """Keep the index current as the sources change (see `rag_cli.stages.watch`).

        First brings the project up to date: `build(sources, ...)` when
        sources or chunk/model `options` are given that differ from the
        remembered ones (or nothing is built yet), else `update()`; its result
        goes to `on_start`. Then each debounced batch of file changes
        (`debounce` seconds, > 0) is applied as one `update(keep, wait)`,
        its result given to `on_update` (`on_batch`, `on_error`: see
        `watch_changes`). Runs until `stop` (threading.Event) is set, or
        KeyboardInterrupt. Returns the number of updates applied after the start.
        Raises BadInput for bad options or no sources (none given or remembered).
        """
        from rag_cli.stages.watch import watch_changes, watch_roots

        check_flag("--debounce", debounce, (0.001, None))
        split_options(options, ("chunk", "model"), _RENAMED)  # unknown options fail before any work
        given = [os.path.abspath(os.fspath(s)) for s in sources]
        remembered = self.config.sources if self.config_path.exists() else None
        fresh = (not remembered or not remembered.paths or not self.index_dir.exists()
                 or (given and (given != list(remembered.paths) or format != remembered.format))
                 or any(v is not None for v in options.values()))
        if fresh:
            if not given:
                raise BadInput(f"give the folders or files to watch (SRC...): {self.config_path} remembers no "
                               f"sources (project folder {self.root})")
            first = self.build(given, format=format, keep=keep, wait=wait, progress=progress, **options)
        else:
            first = self.update(keep=keep, wait=wait, progress=progress)
        if on_start:
            on_start(first)
        roots = watch_roots(list(self.config.sources.paths))
        return watch_changes(roots, lambda: self.update(keep=keep, wait=wait, progress=progress),
                             debounce=debounce, stop=stop, on_batch=on_batch, on_update=on_update,
                             on_error=on_error, ignore=[self.root])  # its own writes are not changes

    def rollback(self, *, wait: float | None = None) -> Rollback:
        """Make the previous index generation current again (the chunk and
        embedding files are not changed: `status` shows them as newer).
        Raises BadInput when there is no older generation."""
        from rag_cli.store.index_folder import rollback

        self.folder.require_exists()
        with self.folder.writing("rollback", wait):
            old, new = rollback(self.index_dir)
        return Rollback(old, new)

    def status(self, *, verify: bool = False) -> Status:
        """The project's state (see `rag_cli.stages.status.project_status`);
        `verify` hashes every generation's files against its files.json."""
        from rag_cli.stages.status import project_status

        self.folder.require_exists()
        return Status.from_dict(project_status(self.folder, verify=verify))

    # -- search --------------------------------------------------------------
    def search(self, query: str, *, filter: str | Sequence[str] | None = None, **options: Any) -> SearchResult:
        """Search one query: the top-k chunks (dense, sparse or hybrid).
        `options`: [search] keys (mode, k, rrf_k, candidates, fusion,
        dense_weight). `filter`: one expression or a list (AND) over chunk and
        document fields and front-matter metadata, e.g. ["doc_id=guides/*",
        "date>=2025-01-01", "tags in [api,cli]"] (`rag_cli.index.filters`);
        applied before ranking, so k hits come back whenever k chunks match.

        Raises BadInput for bad options, an empty query, or no index.
        """
        from dataclasses import asdict

        from rag_cli.index.searcher import check_query

        config, s, mask = self.engines.search_setup(_options(options, "search").get("search"), filter)
        before = s.n_queries_truncated
        hits = s.search(check_query(query), **asdict(config.search), mask=mask)
        return SearchResult(query, config.search.mode, hits, s.n_queries_truncated - before, max_length(s))

    def search_queries(self, queries: str | os.PathLike, *, filter: str | Sequence[str] | None = None,
                       name: str | None = None, format: str = "parquet", output: str | os.PathLike | None = None,
                       level: str = "chunk", progress: Progress | None = None, **options: Any) -> RunFile:
        """Search every query of a query file (JSONL or TSV) and write a run:
        runs/NAME.parquet (NAME: the file's stem-mode) or .trec, or `output`.
        Each query gets the chunks that hold its top k distinct documents, so a
        document-level (MaxP) evaluation is at depth k; `level` "doc" writes
        one row per document instead of per chunk (docno = doc id).
        `options` as for `search`. Returns the `RunFile` written."""
        from rag_cli.stages.search import run_queries

        check_name(name)
        config, s, mask = self.engines.search_setup(_options(options, "search").get("search"), filter)
        path = Path(output) if output else self.run_path(name or f"{file_stem(queries)}-{config.search.mode}", format)
        before = s.n_queries_truncated
        self.manifest()  # recorded into after the run is written: check it first
        out, escaped = run_queries(self.folder, s, Path(queries), config.search, mask, path=path, fmt=format,
                                   level=level, progress=progress)
        return RunFile(out, config.search.mode, config.search.k, s.n_queries_truncated - before, max_length(s),
                       escaped_ids=tuple(escaped))

    # -- rerank --------------------------------------------------------------
    def _reranker(self, model) -> tuple[Any, Callable[[], None]]:
        """(cross-encoder, remember): the configured or given cross-encoder,
        and a function that writes a given `model` to rag.toml once it has worked."""
        opts = {"reranker": model_value(model)}
        config = self.folder.with_options("model", opts)
        if not config.model.reranker:
            raise BadInput("no cross-encoder: pass --model DIR (an ONNX cross-encoder folder) or set "
                           "model.reranker in rag.toml")
        ce = self.engines.cross_encoder(config)

        def remember() -> None:
            if model is not None:
                with self.folder.writing():
                    self.folder.save(("model", opts))
        return ce, remember

    def rerank(self, query: str, *, model: str | os.PathLike | None = None, candidates: int = 100,
               top_n: int = 10, mode: str | None = None, sigmoid: bool = False,
               min_score: float | None = None, progress: Progress | None = None) -> SearchResult:
        """Retrieve the top `candidates` chunks of `query`, rescore them with
        the cross-encoder (raw logits, or their sigmoid) and keep `top_n`
        scoring at least `min_score` (on that scale)."""
        from dataclasses import asdict

        from rag_cli.index.searcher import check_query
        from rag_cli.stages.rerank import SCORE_SCALES, rerank_rows
        from rag_cli.store.chunks import embedded_column

        check_flag("--candidates", candidates, (1, None))
        check_flag("--top-n/-k", top_n, (1, None))
        ce, remember = self._reranker(model)
        sconfig, s, _ = self.engines.search_setup({"mode": mode, "k": candidates})
        before = s.n_queries_truncated
        hits = [h._replace(query_id="q", query=query) for h in s.search(check_query(query), **asdict(sconfig.search))]
        column = embedded_column(s.chunks.column_names)
        texts = {h.chunk_id: s.text(h.row, column) for h in hits}
        out, n_cut = rerank_rows(hits, texts, ce, top_in=candidates, top_out=top_n, probability=sigmoid,
                                 min_score=min_score, progress=progress)
        remember()
        reranked = [r._replace(row=s.row_of(r.chunk_id), text=s.text(s.row_of(r.chunk_id))) for r in out]
        return SearchResult(query, "rerank", reranked, s.n_queries_truncated - before, max_length(s), n_cut,
                            ce.folder.max_length, score_scale=SCORE_SCALES[sigmoid])

    def rerank_run(self, run: str | os.PathLike, *, model: str | os.PathLike | None = None,
                   candidates: int = 100, top_n: int = 10, name: str | None = None, format: str = "parquet",
                   sigmoid: bool = False, min_score: float | None = None,
                   progress: Progress | None = None) -> RunFile:
        """Rerank a Parquet run (from `search_queries`) with the cross-encoder:
        runs/NAME.parquet (NAME: RUN-rerank), rows scoring below `min_score`
        dropped. Returns the `RunFile` written."""
        from rag_cli.stages.rerank import SCORE_SCALES, chunk_texts, rerank_rows
        from rag_cli.store.runs import read_run, trec_escaped, write_run

        check_name(name)
        check_flag("--candidates", candidates, (1, None))
        check_flag("--top-n/-k", top_n, (1, None))
        self.require(self.chunks_path, "chunk")
        ce, remember = self._reranker(model)
        rows = read_run(run)
        texts = chunk_texts(self.chunks_path, {r.chunk_id for r in rows})
        out, n_cut = rerank_rows(rows, texts, ce, top_in=candidates, top_out=top_n, source=str(run),
                                 probability=sigmoid, min_score=min_score, progress=progress)
        path = write_run(self.run_path(name or f"{file_stem(run)}-rerank", format), out, fmt=format)
        remember()
        return RunFile(path, "rerank", top_n, n_pairs_truncated=n_cut, reranker_max_length=ce.folder.max_length,
                       escaped_ids=tuple(trec_escaped(out) if format == "trec" else ()),
                       score_scale=SCORE_SCALES[sigmoid])

    # -- ask -----------------------------------------------------------------
    def _ask_setup(self, options: dict[str, Any], filter, llm: dict | None):
        opts = split_options(options, ("ask", "search"), {"mode": ("search", "mode"), "k": ("ask", "k")})
        return self.engines.ask_setup(opts.get("ask"), llm, opts.get("search"), filter)

    def ask(self, question: str, *, filter: str | Sequence[str] | None = None, llm: dict | None = None,
            on_text: Callable[[str], None] | None = None, **options: Any):
        """Answer `question` from the indexed sources only, citing the
        evidence as [n], or refuse (see `rag_cli.stages.ask`). Returns an
        `AskResult` (`.answer.text`, `.answer.citations`, `.refused`,
        `.evidence`, `.best_score`, `.coverage`, `.reason`, `.timings`,
        `.given` (the evidence the generator read), and
        `.n_queries_truncated`: 1 if the question was cut to the bi-encoder's
        `.max_length` tokens).

        `options`: [ask] keys (k, min_score, min_coverage, strong_score,
        max_sentences, generator: extractive | openai | llama-cpp, rewrite:
        none | multi-query | hyde, gate: on | off, min_rerank_score, grade:
        off | llm, ...) and `mode` ([search]); `llm` overrides keys of the
        `[generator]` section ({key: value}, e.g. {"base_url":
        "http://127.0.0.1:8080/v1", "timeout": 30.0}).

        `on_text(piece)` is called with the answer text as it is written
        (streamed by an LLM generator, plain, markers checked as they close;
        the refusal sentence at once; the extractive answer whole): the
        pieces concatenated are `.answer.text` (or, when the model itself
        refused, the words it refused with).
        """
        from rag_cli.stages.ask import ask

        acfg, scfg, s, mask, gen = self._ask_setup(options, filter, llm)
        before = s.n_queries_truncated
        res = ask(s, gen, question, acfg, scfg, mask, self.engines.ask_reranker(), on_text=on_text)
        res.n_queries_truncated, res.max_length = s.n_queries_truncated - before, max_length(s)
        return res

    def ask_queries(self, queries: str | os.PathLike, *, filter: str | Sequence[str] | None = None,
                    name: str | None = None, llm: dict | None = None, progress: Progress | None = None,
                    **options: Any) -> AnswersFile:
        """Answer every question of a query file into answers/NAME.parquet
        (NAME: the file's stem), with the gate's signals per question (see
        `rag_cli.store.answers`). `options`, `llm` as for `ask`."""
        from rag_cli.stages.ask import answer_queries

        check_name(name)
        acfg, scfg, s, mask, gen = self._ask_setup(options, filter, llm)
        before = s.n_queries_truncated
        self.manifest()  # recorded into after the answers are written: check it first
        path, n, n_refused = answer_queries(self.folder, s, gen, Path(queries), acfg, scfg, mask,
                                            path=self.answers_path(name or file_stem(queries)),
                                            reranker=self.engines.ask_reranker(), progress=progress)
        return AnswersFile(path, n, n_refused, s.n_queries_truncated - before, max_length(s))

    # -- eval ----------------------------------------------------------------
    def evaluate(self, qrels: str | os.PathLike, *, run: str | os.PathLike | None = None,
                 queries: str | os.PathLike | None = None, mode: str | None = None,
                 ks: Sequence[int] = (1, 5, 10, 20, 100), name: str | None = None,
                 output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                 plots: str | os.PathLike | None = None,
                 progress: Progress | None = None) -> tuple[dict, Path | None]:
        """Recall@k, Hit@k, MRR@k, nDCG@k, P@k, MAP@k, MAP and R-precision of
        `run` against `qrels` as trec_eval computes them (document level by
        the best chunk, MaxP), or of a run searched now from `queries` (down to
        k = the largest cutoff distinct documents). Writes `output`, else
        eval/NAME.json (NAME: RUN-QRELS); a `run` needs no project folder:
        without one and without `output` nothing is written (path None).
        Returns (report, path); with `queries`, the report also has
        n_queries_truncated and max_length (see `search_queries`).
        `md` and `plots` (the Markdown and plots `eval_summaries` writes
        afterwards), like every output, are checked before any work
        (`rag_cli.evaluate.outputs.check_eval_files`); every eval method takes them."""
        from rag_cli.stages.evaluation import evaluate

        cutoffs = sorted({int(x) for x in ks})
        if not cutoffs or min(cutoffs) < 1:
            raise BadInput(f"--ks {','.join(map(str, ks))!r}: cutoffs must be integers >= 1")
        one_of("--run FILE (a run to score)", run, "--queries FILE (to search first)", queries)
        check_name(name)
        searched = None
        if queries is not None:
            self.require_exists()
        stem = file_stem(run) if queries is None else name or f"{file_stem(queries)}-{mode or self.config.search.mode}"
        if output is not None:
            path = Path(output)
        elif self.root.is_dir():
            path = self.eval_path(name or f"{stem}-{file_stem(qrels)}")  # RUN-QRELS; RUN as search_queries names it
        else:
            path = None
        self._check_eval_files({"--run": run, "--queries": queries, "--qrels": qrels}, path, output, md, plots)
        if queries is not None:
            from rag_cli.evaluate.datasets import read_qrels, read_queries

            self._judged_here(read_queries(queries), read_qrels(qrels), f"--queries {queries}", f"--qrels {qrels}")
            searched = run = self.search_queries(queries, mode=mode, k=max(cutoffs), name=name, progress=progress)
        report = evaluate(Path(run), Path(qrels), cutoffs, path)
        if searched is not None:
            report = {**report, "n_queries_truncated": searched.n_queries_truncated, "max_length": searched.max_length}
        return report, path

    def _check_eval_files(self, inputs: dict, path: Path | None, output, md, plots) -> None:
        """`check_eval_files` of an eval method: its report `path` is named -o
        when given, else "the report"; outputs inside the project folder go
        under eval/ only."""
        from rag_cli.evaluate.outputs import check_eval_files

        check_eval_files(inputs, {"-o" if output is not None else "the report": path, "--md": md}, plots=plots,
                         project=self.root if self.root.is_dir() else None)

    def _judged_here(self, queries: list, qrels: dict, queries_flag: str, qrels_flag: str) -> list:
        """The queries with a relevant document in `qrels`
        (`queries_with_relevant`), after checking that some of their relevant
        documents (or chunks: qrels may judge chunk ids) are in this project's
        chunks.parquet (`relevant_in_corpus`).
        Raises BadInput otherwise: the scores would all be 0."""
        from rag_cli.evaluate.datasets import queries_with_relevant, relevant_in_corpus
        from rag_cli.store.chunks import read_chunks

        kept = queries_with_relevant(queries, qrels, queries_flag, qrels_flag)
        if self.chunks_path.exists():  # qrels may judge documents or chunks
            ids = read_chunks(self.chunks_path, columns=["doc_id", "chunk_id"], required=["doc_id", "chunk_id"])
            relevant_in_corpus({q: qrels[q] for q, _ in kept},
                               ids.column("doc_id").to_pylist() + ids.column("chunk_id").to_pylist(),
                               qrels_flag, f"project {self.root}")
        return kept

    def compare(self, qrels: str | os.PathLike, runs: Sequence[str | os.PathLike], *,
                ks: Sequence[int] = (1, 5, 10, 20, 100), permutations: int = 10000, seed: int = 0,
                name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                plots: str | os.PathLike | None = None) -> tuple[dict, Path | None]:
        """Score each run against `qrels` (as `evaluate`) and compare each with
        the first: per metric the mean difference, paired randomisation and
        t-test p-values, Holm-corrected across metrics, and win/tie/loss
        counts (see `rag_cli.evaluate.compare`). Writes `output`, else
        eval/NAME.json (NAME: compare-FIRST-QRELS) when the project folder
        exists, else nothing. Returns (report, path)."""
        from rag_cli.stages.evaluation import compare

        cutoffs = sorted({int(x) for x in ks})
        if not cutoffs or min(cutoffs) < 1:
            raise BadInput(f"--ks {','.join(map(str, ks))!r}: cutoffs must be integers >= 1")
        check_name(name)
        if output is not None:
            path = Path(output)
        elif self.root.is_dir() and runs:
            path = self.eval_path(name or f"compare-{file_stem(runs[0])}-{file_stem(qrels)}")
        else:
            path = None
        self._check_eval_files({"RUNS": list(runs), "--qrels": qrels}, path, output, md, plots)
        report = compare([Path(r) for r in runs], Path(qrels), cutoffs, path, permutations=permutations, seed=seed)
        return report, path

    def evaluate_answers(self, answers: str | os.PathLike, gold: str | os.PathLike | None = None, *,
                         judge: bool = False, judge_generator: str | None = None, judge_repeats: int = 3,
                         judge_temperature: float = 0.3, judge_questions: int = 3, llm: dict | None = None,
                         name: str | None = None, output: str | os.PathLike | None = None,
                         unanswerable: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                         plots: str | os.PathLike | None = None,
                         progress: Progress | None = None) -> tuple[dict, Path]:
        """Exact match, F1, has-answer, citation precision/recall, refusal
        rate and latency p50/p95 of `answers` (answers/NAME.parquet of
        `ask_queries`) against `gold` (answers.jsonl), reading the cited
        chunks' texts from the project's chunks (see
        `rag_cli.evaluate.answers`). With `unanswerable` (answers to
        made-unanswerable questions, asked in a project of the variant
        corpus), the report's "refusal" has `refusal_rates`: refusal on
        made-unanswerable, false-answer rate, and the false-refusal rate on
        every question of `answers`. Writes `output`, else eval/NAME.json
        (NAME: answers-ANSWERS). Returns (report, path).

        With `judge`: also RAGAS faithfulness and answer relevancy (see
        `rag_cli.evaluate.judge`) under the report's "judge" key, judged by
        `judge_generator` (openai | llama-cpp; None: ask.generator) set up by
        the [generator] config with `llm` overrides, `judge_repeats` times,
        repeat r sampled at `judge_temperature` with seed r (at 0 the repeats
        are identical on a deterministic server), `judge_questions`
        questions per answer for relevancy; the judge's model is named in
        the report. `gold` may then be None (only the judge's metrics).
        Raises BadInput for neither gold nor judge, an extractive judge, or
        bad files or flags."""
        from rag_cli.stages.evaluation import evaluate_answers

        check_name(name)
        if gold is None and not judge:
            raise BadInput("--answers FILE needs --gold FILE (gold answers) or --judge (an LLM judge), or both")
        self.require_exists()
        self.require(self.chunks_path, "chunk")
        path = Path(output) if output else self.eval_path(name or f"answers-{file_stem(answers)}")
        self._check_eval_files({"--answers": answers, "--gold": gold, "--unanswerable": unanswerable}, path, output, md,
                          plots)
        cut = Path(unanswerable) if unanswerable is not None else None
        if not judge:
            return evaluate_answers(Path(answers), Path(gold), self.chunks_path, path, unanswerable=cut,
                                    ask_config=self.config.ask), path
        check_flag("--judge-repeats", judge_repeats, (1, 100))
        check_flag("--judge-questions", judge_questions, (1, 20))
        check_flag("--judge-temperature", judge_temperature, (0, 2))
        report = evaluate_answers(Path(answers), Path(gold) if gold is not None else None, self.chunks_path, None,
                                  unanswerable=cut, ask_config=self.config.ask)
        report["judge"] = self._judge(Path(answers), judge_generator, judge_repeats, judge_temperature,
                                      judge_questions, llm, progress)
        from rag_cli.store.eval_reports import write_report

        write_report(path, report)
        return report, path

    def _judge(self, answers: Path, generator: str | None, repeats: int, temperature: float, n_questions: int,
               llm: dict | None, progress: Progress | None) -> dict:
        """The "judge" part of `evaluate_answers`: the LLM from the config, the bi-encoder, the stage."""
        from rag_cli.generate.factory import describe_generator, load_generator
        from rag_cli.stages.evaluation import judge_answers

        config, _ = self.config.with_options("ask", {"generator": generator}, JUDGE_FLAGS)
        config, _ = config.with_options("generator", llm, JUDGE_FLAGS)
        if config.ask.generator == "extractive":
            raise BadInput("--judge needs an LLM: give --judge-generator openai or llama-cpp "
                           "(or set ask.generator), with the [generator] settings of that model")
        gen = load_generator(config.ask, None, None, config.generator, threads=config.model.threads,
                             model_flag="--judge-model" if (llm or {}).get("model") else "--llm-model")
        embedder = self.engines.embedder(config)
        completes = [lambda prompt, max_tokens, seed=seed: gen.complete(prompt, max_tokens, temperature=temperature,
                                                                        seed=seed)
                     for seed in range(repeats)]
        out = judge_answers(answers, self.chunks_path, completes, embedder.encode_queries,
                            n_questions=n_questions, context_tokens=config.generator.context_tokens,
                            progress=progress)
        settings = {**describe_generator(gen), "temperature": temperature, "seeds": list(range(repeats)),
                    "repeats": repeats, "questions_per_answer": n_questions,
                    "context": "contexts (every evidence chunk given to the generator; small-to-big: its context)",
                    "context_tokens": config.generator.context_tokens, "encoder": config.model.embedder}
        return {"model": settings, **out}

    def tune_refusal(self, answers: str | os.PathLike, unanswerable: str | os.PathLike, *,
                     max_false_refusal: float = 0.05, test_answers: str | os.PathLike | None = None,
                     test_unanswerable: str | os.PathLike | None = None, name: str | None = None,
                     output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                     plots: str | os.PathLike | None = None) -> tuple[dict, Path]:
        """Grid-search the refusal gate's thresholds (ask.min_score,
        min_coverage, min_entity_coverage, strong_score, min_rerank_score) on
        answers recorded with the gate off (`ask_queries(..., gate="off")`):
        `answers` to answerable questions, `unanswerable` to made-unanswerable
        ones; the most refusals of the latter with false refusals on the
        former at most `max_false_refusal` (see
        `rag_cli.evaluate.gate_tuning`). Writes the winner to rag.toml [ask],
        scores the current and the tuned setting on the test pair when given.
        Writes `output`, else eval/NAME.json (NAME: tune-refusal-ANSWERS).
        Returns (report, path). Raises BadInput for files not recorded that way."""
        from rag_cli.evaluate.gate_tuning import TUNED, check_recorded, tune_refusal
        from rag_cli.store.answers import read_answers
        from rag_cli.store.eval_reports import write_report

        check_name(name)
        check_flag("--max-false-refusal", max_false_refusal, (0, 1))
        if (test_answers is None) != (test_unanswerable is None):
            raise BadInput("--test-answers and --test-unanswerable go together: give both (the test split) or neither")
        self.require_exists()
        path = Path(output) if output else self.eval_path(name or f"tune-refusal-{file_stem(answers)}")
        self._check_eval_files({"--answers": answers, "--unanswerable": unanswerable, "--test-answers": test_answers,
                           "--test-unanswerable": test_unanswerable, "rag.toml": self.config_path},
                          path, output, md, plots)

        def pair(a, u):
            rows = []
            for f, flag in ((a, "--answers" if a is answers else "--test-answers"),
                            (u, "--unanswerable" if u is unanswerable else "--test-unanswerable")):
                rows.append(read_answers(Path(f)).to_pylist())
                check_recorded(rows[-1], f"{flag} {f}")
            return tuple(rows)

        train = pair(answers, unanswerable)
        test = pair(test_answers, test_unanswerable) if test_answers is not None else None
        report = tune_refusal(train, test, self.config.ask, max_false_refusal=max_false_refusal)
        with self.folder.writing("eval --tune"):
            self.folder.save(("ask", {k: report["best"][k] for k in TUNED}))
        report = {"answers": str(answers), "unanswerable": str(unanswerable),
                  "test_answers": str(test_answers or ""), "test_unanswerable": str(test_unanswerable or ""),
                  "written_to": str(self.config_path), **report}
        write_report(path, report)
        return report, path

    @staticmethod
    def make_unanswerable(n: int, *, corpus: str | os.PathLike, queries: str | os.PathLike,
                          qrels: str | os.PathLike, output: str | os.PathLike, seed: int = 0) -> dict:
        """Write the made-unanswerable variant of `corpus` (BEIR JSONL): the
        gold documents of at least `n` questions of `queries` (judged in
        `qrels`) removed, into the folder `output` (corpus.jsonl,
        queries.jsonl of those questions, removed.json); no project needed.
        Returns the removed.json dict (see `rag_cli.evaluate.unanswerable`).
        Raises BadInput when `output` holds an input (`check_eval_files`)."""
        from rag_cli.evaluate.outputs import check_eval_files
        from rag_cli.evaluate.unanswerable import write_unanswerable

        check_eval_files({"--corpus": corpus, "--queries": queries, "--qrels": qrels}, {}, folder=("-o", output))

        return write_unanswerable(corpus, queries, qrels, n, output, seed=seed)

    def tune_fusion(self, queries: str | os.PathLike, qrels: str | os.PathLike, *,
                    test_queries: str | os.PathLike | None = None, test_qrels: str | os.PathLike | None = None,
                    candidates: int | None = None, permutations: int = 10000, name: str | None = None,
                    output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                    plots: str | os.PathLike | None = None, progress: Progress | None = None) -> tuple[dict, Path]:
        """Grid-search the hybrid fusion (RRF k; min-max or z-score weighted
        sums and their dense weight) for nDCG@10 on the train split
        (`queries`, `qrels`), write the winner to rag.toml (search.fusion,
        search.rrf_k, search.dense_weight), and score it against RRF k = 60 on
        the test split when given (see `rag_cli.evaluate.tuning`). Writes
        `output`, else eval/NAME.json (NAME: tune-fusion-QUERIES). Returns
        (report, path)."""
        from rag_cli.evaluate.datasets import read_qrels, read_queries
        from rag_cli.evaluate.tuning import tune_fusion
        from rag_cli.store.eval_reports import write_report

        check_name(name)
        if (test_queries is None) != (test_qrels is None):
            raise BadInput("--test-queries and --test-qrels go together: give both (the test split) or neither")
        self.require_exists()
        path = Path(output) if output else self.eval_path(name or f"tune-fusion-{file_stem(queries)}")
        self._check_eval_files({"--queries": queries, "--qrels": qrels, "--test-queries": test_queries,
                           "--test-qrels": test_qrels, "rag.toml": self.config_path}, path, output, md, plots)
        config = self.folder.with_options("search", {"candidates": candidates})
        train = (read_queries(queries), read_qrels(qrels))
        self._judged_here(*train, f"--queries {queries}", f"--qrels {qrels}")
        test = (read_queries(test_queries), read_qrels(test_qrels)) if test_queries is not None else None
        if test is not None:
            self._judged_here(*test, f"--test-queries {test_queries}", f"--test-qrels {test_qrels}")
        s = self.engines.searcher(config, with_embedder=True)
        report = tune_fusion(s, train, test, candidates=config.search.candidates, permutations=permutations,
                             progress=progress)
        best = report["best"]
        with self.folder.writing("eval --tune"):
            self.folder.save(("search", {"fusion": best["fusion"], **{key: best[key] for key in ("rrf_k", "dense_weight")
                                                                if key in best}}))
        report = {"queries": str(queries), "qrels": str(qrels), "test_queries": str(test_queries or ""),
                  "test_qrels": str(test_qrels or ""), "written_to": str(self.config_path), **report}
        write_report(path, report)
        return report, path

    def perturb(self, qrels: str | os.PathLike, queries: str | os.PathLike, kinds: Sequence[str], *,
                mode: str | None = None, ks: Sequence[int] = (10, 100), seed: int = 0, permutations: int = 10000,
                name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
                plots: str | os.PathLike | None = None, progress: Progress | None = None) -> tuple[dict, Path]:
        """Search `queries` as given and changed each way of `kinds` (upper,
        lower, typo, punct; see `rag_cli.evaluate.perturb`), score every run
        against `qrels` at `ks` (down to max(ks) distinct documents) and
        report per kind the metrics, the loss against the original (changed -
        original) and its paired tests (`compare_reports`). Writes `output`,
        else eval/NAME.json (NAME: perturb-QUERIES). Returns (report, path)."""
        from rag_cli.evaluate.compare import compare_reports
        from rag_cli.evaluate.datasets import read_qrels, read_queries
        from rag_cli.evaluate.perturb import perturb_queries
        from rag_cli.evaluate.report import evaluate_rows
        from rag_cli.stages.search import search_rows
        from rag_cli.store.eval_reports import write_report

        check_name(name)
        cutoffs = sorted({int(x) for x in ks})
        if not cutoffs or min(cutoffs) < 1:
            raise BadInput(f"--ks {','.join(map(str, ks))!r}: cutoffs must be integers >= 1")
        if not kinds:
            raise BadInput("--perturb: name one or more of case, upper, lower, typo, punct")
        self.require_exists()
        path = Path(output) if output else self.eval_path(name or f"perturb-{file_stem(queries)}")
        self._check_eval_files({"--queries": queries, "--qrels": qrels}, path, output, md, plots)
        original = read_queries(queries)
        gold = read_qrels(qrels)
        self._judged_here(original, gold, f"--queries {queries}", f"--qrels {qrels}")
        config, s, mask = self.engines.search_setup({"mode": mode, "k": max(cutoffs)})
        base = evaluate_rows(search_rows(s, original, config.search, mask, progress=progress), gold, cutoffs)
        out = {"queries": str(queries), "qrels": str(qrels), "mode": config.search.mode, "seed": seed,
               "n_queries": base["n_queries"], "original": base["metrics"], "perturbations": {}}
        for kind in kinds:
            changed = perturb_queries(original, kind, seed)
            rep = evaluate_rows(search_rows(s, changed, config.search, mask, progress=progress), gold, cutoffs)
            comp = compare_reports([base, rep], ["original", kind], permutations=permutations)["comparisons"][0]
            out["perturbations"][kind] = {
                "n_changed": sum(a != b for (_, a), (_, b) in zip(original, changed)),
                "metrics": rep["metrics"],
                "loss": {m: r["mean_diff"] for m, r in comp["metrics"].items()},
                "comparison": comp["metrics"],
                "examples": [t for (_, o), (_, t) in zip(original, changed) if o != t][:3],
            }
        write_report(path, out)
        return out, path

    @staticmethod
    def eval_summaries(report: dict, *, md: str | os.PathLike | None = None,
                       plots: str | os.PathLike | None = None, name: str = "eval") -> list[Path]:
        """Write the Markdown summary of an eval report to `md` and its PNG
        plots into the folder `plots` as NAME-KIND.png (see
        `rag_cli.evaluate.markdown`, `rag_cli.evaluate.plots`; plots need
        matplotlib). Returns the paths written."""
        from rag_cli import atomic
        from rag_cli.evaluate.markdown import to_markdown

        written: list[Path] = []
        if md is not None:
            atomic.write_text(md, to_markdown(report))
            written.append(Path(md))
        if plots is not None:
            from rag_cli.evaluate.plots import plot_report

            written += plot_report(report, plots, name)
        return written

    def funnel(self, qrels: str | os.PathLike, queries: str | os.PathLike, *, k: int | None = None,
               candidates: int | None = None, rrf_k: int | None = None, answers: bool = True,
               name: str | None = None, output: str | os.PathLike | None = None, md: str | os.PathLike | None = None,
               plots: str | os.PathLike | None = None, progress: Progress | None = None) -> tuple[dict, Path]:
        """Where each query's gold first goes missing (sparse and dense
        candidates, fusion, rerank when model.reranker is set, the evidence
        and the citations of `ask` when `answers`), and ANN recall (HNSW vs
        exact search); see `rag_cli.evaluate.funnel`. Writes `output`, else
        eval/NAME.json (NAME: funnel-QUERIES). Returns (report, path)."""
        from rag_cli.evaluate.datasets import read_qrels, read_queries
        from rag_cli.evaluate.funnel import funnel
        from rag_cli.stages.ask import ask
        from rag_cli.store.eval_reports import write_report

        check_name(name)
        path = Path(output) if output else self.eval_path(name or f"funnel-{file_stem(queries)}")
        self._check_eval_files({"--queries": queries, "--qrels": qrels}, path, output, md, plots)
        self.require_exists()
        asked, gold = read_queries(queries), read_qrels(qrels)
        self._judged_here(asked, gold, f"--queries {queries}", f"--qrels {qrels}")
        config = self.folder.with_options("search", {"k": k, "candidates": candidates, "rrf_k": rrf_k, "mode": "hybrid"})
        s = self.engines.searcher(config, with_embedder=True)
        reranker = None
        if config.model.reranker:
            from rag_cli.stages.rerank import rerank_rows

            ce = self.engines.cross_encoder(config)

            def reranker(text, hits):
                rows = [h._replace(query_id="q", query=text) for h in hits]
                return rerank_rows(rows, {h.chunk_id: h.text for h in hits}, ce, top_in=len(rows),
                                   top_out=max(len(rows), 1))[0]
        answerer = None
        if answers:
            acfg, scfg, s2, mask, gen = self.engines.ask_setup()
            ask_reranker = self.engines.ask_reranker()

            def answerer(text):
                res = ask(s2, gen, text, acfg, scfg, mask, ask_reranker)
                gate_refused = res.refused and res.reason != "the generator found no sentence to quote"
                given = [] if gate_refused else [e.chunk_id for e in res.evidence if e.score >= acfg.min_score]
                return given, list(res.answer.citations)
        search = config.search
        report = funnel(s, asked, gold, k=search.k, candidates=search.candidates,
                        rrf_k=search.rrf_k, fusion=search.fusion, dense_weight=search.dense_weight,
                        reranker=reranker, answerer=answerer,
                        ann_ks=sorted({10, search.k, search.candidates}), progress=progress)
        report = {"queries": str(queries), "qrels": str(qrels), **report}
        write_report(path, report)
        return report, path

