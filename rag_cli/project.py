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

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

from rag_cli.config import Config, check_flag, split_options
from rag_cli.engines import Engines, max_length, model_value
from rag_cli.errors import BadInput, one_of  # noqa: F401 (one_of: re-exported)
from rag_cli.progress import Progress
from rag_cli.results import (AnswersFile, BuildSummary, ChunkSummary, EmbedSummary, IndexSummary, Rollback,
                             RunFile, SearchResult, Status, UpdateSummary)
from rag_cli.store.folder import DEFAULT_PROJECT, ProjectFolder, check_name, file_stem, project_dir

__all__ = ["Project", "SearchResult", "RunFile", "DEFAULT_PROJECT", "project_dir", "check_name", "file_stem"]

#: Keyword options of the pipeline that are not named after their config key.
_RENAMED = {"model": ("model", "embedder")}

def _check_ray(address: str | None) -> None:
    """BadInput for a bad `ray` address (`--ray`) or a missing ray extra, before any work; nothing for None."""
    if address is not None:
        from rag_cli.models.ray_cluster import check_address, import_ray

        check_address(address)
        import_ray()


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

    def embed(self, *, ray: str | None = None, wait: float | None = None, progress: Progress | None = None,
              **options: Any) -> EmbedSummary:
        """Embed chunks.parquet with the bi-encoder: embeddings.parquet, only
        new or changed texts computed (see `rag_cli.stages.embed.embed_chunks`).
        `options`: [model] keys (`model`, precision, threads, provider,
        on_truncate: what a chunk longer than the model's max_length does).
        `ray`: embed on a Ray cluster (the `ray` extra; `rag_cli.models.ray_encoder`):
        "local" starts a local Ray instance, "auto", "ray://HOST:PORT" or
        "HOST:PORT" connects to a running cluster; the same files are written.
        Raises BadInput for bad options, a missing model or chunks.parquet,
        a bad `ray` address or a missing ray extra, or a truncated chunk with
        on_truncate="error"; WorkFailed when the Ray cluster cannot be reached."""
        from rag_cli.stages.embed import embed_chunks

        self.require(self.chunks_path, "chunk")
        opts = _options(options, "model")
        config = self.folder.with_options("model", opts.get("model"))
        encoder = self.engines.embedder(config, on_ray=ray is not None)  # checks the options before rag.toml has them
        _check_ray(ray)
        with self.folder.writing("embed", wait), self.engines.on_ray(encoder, config, ray) as encoder:
            summary = embed_chunks(self.folder, encoder, progress, on_truncate=config.model.on_truncate)
            if ray is not None:
                summary["ray"] = encoder.report()
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
    def build(self, sources: Sequence[str | os.PathLike], *, format: str = "auto", ray: str | None = None,
              wait: float | None = None, progress: Progress | None = None, **options: Any) -> BuildSummary:
        """`chunk`, `embed` and `index` under one lock, with the same options
        (keys of [chunk], [model] and [index]); `ray` as for `embed`. The
        sources (as absolute paths) and `format` are remembered in rag.toml
        `[sources]` for `update`. Every option and the model are checked before
        anything is written, and the three stages commit all or none
        (`ProjectFolder.all_or_nothing`): a failure, Ctrl-C included, leaves the
        folder as it was (a new folder is removed)."""
        from rag_cli.loaders.sources import check_sources
        from rag_cli.models.loading import check_embedder

        split = split_options(options, ("chunk", "model", "index"), _RENAMED)  # unknown options fail first
        _check_ray(ray)
        given = _options(options, "chunk", "model", "index")
        config = self.folder.config
        for section in ("chunk", "model", "index"):  # every option and the model, before anything is written
            config, _ = config.with_options(section, given.get(section))
        check_sources(sources)  # a missing source fails before the default model is converted
        check_embedder(asdict(config.model))
        model = {("model" if k == "embedder" else k): v for k, v in split.get("model", {}).items()}
        sources = [os.path.abspath(os.fspath(s)) for s in sources]
        with self.folder.writing("build", wait), self.folder.all_or_nothing():
            c = self.chunk(sources, format=format, progress=progress, **split.get("chunk", {}),
                           **{k: v for k, v in model.items() if k in ("model", "precision")})
            e = self.embed(ray=ray, progress=progress,
                           **{k: v for k, v in model.items() if k not in ("model", "precision")})
            i = self.index(progress=progress, **split.get("index", {}))
            self.folder.save(("sources", {"paths": sources, "format": format}))
        return BuildSummary(c, e, i)

    def update(self, *, keep: int | None = None, ray: str | None = None, wait: float | None = None,
               progress: Progress | None = None) -> UpdateSummary:
        """Rescan the sources remembered by `build`, rechunk new and changed
        documents, embed only new texts (on a Ray cluster with `ray`, as for
        `embed`) and write a new index generation
        updated in place (see `rag_cli.stages.update`). A change of the chunk
        settings rechunks everything; another embedder or HNSW M /
        ef_construction rebuilds the index (`index.full` says why).
        Also recorded in manifest.json under `update`. The model is checked
        before anything is written, and the stages commit all or none, as in `build`.
        Raises BadInput when no sources are remembered (run `build` first)."""
        from rag_cli.chunking.setup import chunk_settings
        from rag_cli.models.loading import check_embedder
        from rag_cli.stages.embed import embed_chunks
        from rag_cli.stages.update import add_pending, check_served_index, pending_counts, update_chunks, update_index

        f = self.folder
        config = f.with_options("index", {"keep": keep})
        _check_ray(ray)
        src = config.sources
        if not src.paths:
            raise BadInput(f"{f.config_path} remembers no sources ([sources] paths): run "
                           f"`rag build SRC...` first (project folder {f.root})")
        check_embedder(asdict(config.model))  # a removed model folder fails before anything is rechunked
        with f.writing("update", wait), f.all_or_nothing():
            check_served_index(f, config.index)  # a deleted Milvus Lite file: before anything is rechunked
            previous = f.manifest().get("chunk", {}).get("params")
            settings = chunk_settings(config.chunk, config.model, src.format)
            rechunk = None if previous == settings else (
                "the chunk settings changed" if previous else "no earlier chunk settings recorded")
            pending = pending_counts(f)
            c = update_chunks(f, list(src.paths), fmt=src.format, params=config.chunk, model=config.model,
                              full=rechunk is not None, progress=progress)
            c = add_pending(c, pending)
            with self.engines.on_ray(self.engines.embedder(config, on_ray=ray is not None), config,
                                     ray) as encoder:
                e = embed_chunks(f, encoder, progress)
                if ray is not None:
                    e["ray"] = encoder.report()
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
        embedding files are not changed: `status` shows them as newer); a
        Milvus alias is switched back with it (`rag_cli.index.milvus_publish.sync`).

        All or nothing: before CURRENT moves, the target generation's serving
        copy is checked (`rag_cli.index.backends.check_switch`: its Milvus
        reachable, its Lite file present and not held by another process,
        its collection there and this project's), so a refusal never moves
        CURRENT (a `rag serve` would hot-reload it); then CURRENT moves and
        the alias follows it. When the alias switch still fails, CURRENT is
        moved back (and the alias with it, where it had moved). Raises
        BadInput when there is no older generation, and what the check or
        the alias switch raised."""
        from rag_cli.index.backends import check_switch, sync_serving
        from rag_cli.store.index_folder import rollback, switch_current

        self.folder.require_exists()
        with self.folder.writing("rollback", wait):
            old, new = rollback(self.index_dir, before=check_switch)
            try:
                sync_serving(self.index_dir)
            except BaseException:
                switch_current(self.index_dir, old)  # not rolled back: CURRENT as it was
                try:
                    sync_serving(self.index_dir)  # the alias back too, if it had moved before the failure
                except Exception:  # noqa: BLE001 - the first failure is the one to report
                    pass
                raise
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
        return SearchResult(query, config.search.mode, hits, n_queries_truncated=s.n_queries_truncated - before,
                            max_length=max_length(s))

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
        if output is not None:  # not the query file, not a file of the project (only under runs/)
            from rag_cli.evaluate.outputs import check_eval_files

            check_eval_files({"--queries": queries}, {"-o": output},
                             project=self.root if self.root.is_dir() else None, under="runs")
        config, s, mask = self.engines.search_setup(_options(options, "search").get("search"), filter)
        path = Path(output) if output else self.run_path(name or f"{file_stem(queries)}-{config.search.mode}", format)
        before = s.n_queries_truncated
        self.manifest()  # recorded into after the run is written: check it first
        out, escaped = run_queries(self.folder, s, Path(queries), config.search, mask, path=path, fmt=format,
                                   level=level, progress=progress)
        return RunFile(out, config.search.mode, config.search.k, tuple(escaped),
                       n_queries_truncated=s.n_queries_truncated - before, max_length=max_length(s))

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
        from rag_cli.stages.rerank import SCORE_SCALES, check_min_score, rerank_rows
        from rag_cli.store.chunks import embedded_column

        check_flag("--candidates", candidates, (1, None))
        check_flag("--top-n/-k", top_n, (1, None))
        check_min_score(min_score, sigmoid)
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
        return SearchResult(query, "rerank", reranked, n_queries_truncated=s.n_queries_truncated - before,
                            max_length=max_length(s), n_pairs_truncated=n_cut,
                            reranker_max_length=ce.folder.max_length, score_scale=SCORE_SCALES[sigmoid])

    def rerank_run(self, run: str | os.PathLike, *, model: str | os.PathLike | None = None,
                   candidates: int = 100, top_n: int = 10, name: str | None = None, format: str = "parquet",
                   sigmoid: bool = False, min_score: float | None = None,
                   progress: Progress | None = None) -> RunFile:
        """Rerank a Parquet run (from `search_queries`) with the cross-encoder:
        runs/NAME.parquet (NAME: RUN-rerank), rows scoring below `min_score`
        dropped. Returns the `RunFile` written."""
        from rag_cli.stages.rerank import SCORE_SCALES, check_min_score, chunk_texts, rerank_rows
        from rag_cli.store.runs import read_run, trec_escaped, write_run

        check_name(name)
        check_flag("--candidates", candidates, (1, None))
        check_flag("--top-n/-k", top_n, (1, None))
        check_min_score(min_score, sigmoid)
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
        options = dict(options)
        reader = options.pop("reader", None)
        opts = split_options(options, ("ask", "search"), {"mode": ("search", "mode"), "k": ("ask", "k")})
        self._reader_option = {"reader": model_value(reader) if reader else reader}
        return self.engines.ask_setup(opts.get("ask"), llm, opts.get("search"), filter)

    def _ask_reader(self):
        """The reader for this ask: the `reader` option given, else model.reader (None when neither)."""
        return self.engines.ask_reader(getattr(self, "_reader_option", None))

    def ask(self, question: str, *, filter: str | Sequence[str] | None = None, llm: dict | None = None,
            on_text: Callable[[str], None] | None = None, **options: Any):
        """Answer `question` from the indexed sources only, citing the
        evidence as [n], or refuse (see `rag_cli.stages.ask`). Returns an
        `AskResult` (`.answer.text`, `.answer.citations`, `.refused`,
        `.evidence`, `.best_score`, `.coverage`, `.reason`, `.timings`,
        `.given` (the evidence the generator read), and
        `.n_queries_truncated`: 1 if the question was cut to the bi-encoder's
        `.max_length` tokens).

        `options`: [ask] keys (k, min_score, min_score_en (min_score alone
        sets both: `rag_cli.config.apply_follows`), min_coverage, strong_score,
        max_sentences, generator: extractive | openai | llama-cpp, rewrite:
        none | multi-query | hyde, gate: on | off, min_rerank_score, grade:
        off | llm, prompt, ...), `mode` ([search]) and `reader`
        (model.reader: an ONNX question-answering folder); `llm` overrides keys of the
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
        res = ask(s, gen, question, acfg, scfg, mask, self.engines.ask_reranker(), on_text=on_text,
                  reader=self._ask_reader())
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
                                            reranker=self.engines.ask_reranker(), progress=progress,
                                            reader=self._ask_reader())
        return AnswersFile(path, n, n_refused, s.n_queries_truncated - before, max_length(s))
