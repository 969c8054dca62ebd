"""The loaded models and index of one project, kept while they are current.

`Engines` loads what a query needs (the bi-encoder, the cross-encoder, the
current index generation, a generator) from a `ProjectFolder`'s config and
keeps the searcher while the current generation stays the same, so a
long-lived `Project` (a script, a server) pays the load once. `Project`
and the evaluation lab (`rag_cli.lab`) use it; it runs no stage.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from rag_cli.config import AskConfig, Config, SearchConfig
from rag_cli.errors import BadInput
from rag_cli.store.folder import ProjectFolder


def model_value(value: Any) -> str | None:
    """A `--model` value as rag.toml keeps it: a folder as its absolute path
    (see `rag_cli.models.defaults.model_setting`); None stays None."""
    if value is None:
        return None
    from rag_cli.models.defaults import model_setting

    return model_setting(value)


@dataclass
class Engines:
    """The models and searcher of the project at `folder`, loaded on first use."""

    folder: ProjectFolder
    _searchers: dict = field(default_factory=dict, repr=False, init=False)

    def embedder(self, config: Config, on_ray: bool = False):
        """The configured bi-encoder (`BiEncoder`); `on_ray`: for `on_ray`
        (its provider is checked on Ray's nodes, not here: `load_embedder`).
        Raises BadInput for a bad model setting."""
        from rag_cli.models.loading import load_embedder

        return load_embedder(asdict(config.model), on_ray=on_ray)

    @staticmethod
    @contextlib.contextmanager
    def on_ray(encoder, config: Config, address: str | None) -> Iterator[Any]:
        """`encoder` (the configured `BiEncoder`) for `rag embed`: itself when
        `address` is None, else a `RayEncoder` on the Ray cluster at `address`
        (`--ray`: "local" starts a local instance), connected when there are
        texts to embed (not at all when every vector is cached) and shut down
        at the end of the block (`rag_cli.models.ray_cluster.ray_cluster`). Raises
        BadInput for a bad address or a missing ray extra, WorkFailed when no
        cluster answers."""
        if address is None:
            yield encoder
            return
        from rag_cli.models.onnx_runtime import execution_providers
        from rag_cli.models.ray_cluster import ray_cluster
        from rag_cli.models.ray_encoder import RayEncoder

        with contextlib.ExitStack() as stack:  # connected when there are texts to embed, shut down at the end
            yield RayEncoder(encoder.folder, lambda: stack.enter_context(ray_cluster(address)),
                             threads=config.model.threads or None,
                             providers=execution_providers(config.model.provider or "cpu", here=False))

    @staticmethod
    def cross_encoder(config: Config):
        """The configured cross-encoder (`CrossEncoder`, model.reranker)."""
        from rag_cli.models.loading import load_cross_encoder

        return load_cross_encoder(config.model.reranker, threads=config.model.threads,
                                  provider=config.model.provider)

    def searcher(self, config: Config, *, with_embedder: bool, parts: tuple[str, ...] = ("dense", "sparse")):
        """The loaded current index generation (kept while it stays current),
        with at least the indexes in `parts` and the bi-encoder when
        `with_embedder`. One searcher is kept per generation and grows: a
        half (dense, sparse) or the bi-encoder it lacks is opened once and
        added, so a `Project` that alternates modes opens each half once.
        Raises BadInput if there is no index or the embedder differs from the index's."""
        from rag_cli.index.searcher import Searcher, check_index_embedder

        f = self.folder
        f.require_exists()
        stamp = self._stamp()
        model_key = asdict(config.model).__repr__() if with_embedder else None
        kept = self._searchers.get(stamp)  # (model key of its embedder, Searcher)
        s = kept[1] if kept is not None else None
        missing = tuple(p for p in parts if s is None or getattr(s, p) is None)
        new_model = with_embedder and (s is None or s.embedder is None or kept[0] != model_key)
        if not missing and not new_model:
            return s
        embedder = None
        if new_model:
            embedder = self.embedder(config)
            embedder.query_encoder.preload()  # the graph loads while the index and the tokenizer do
        if missing:
            opened = Searcher.open(f.index_dir, embedder, f.root, missing)
            if s is not None and opened.generation_key != s.generation_key:  # CURRENT moved meanwhile
                kept, s = None, None
                opened = Searcher.open(f.index_dir, embedder, f.root, parts) if len(missing) < len(parts) else opened
            if s is None:
                s = opened
            else:
                for p in missing:
                    setattr(s, p, getattr(opened, p))
        elif embedder is not None:
            check_index_embedder(s.index_dir, s.meta, embedder)
        if embedder is not None:
            s.embedder = embedder
        model = model_key if embedder is not None else kept[0] if kept is not None else None
        # keyed by the generation actually opened (CURRENT may have moved since _stamp read it)
        self._searchers = {s.generation_key: (model, s)}
        return s

    def _stamp(self) -> tuple:
        """Which generation is current, in a way that never repeats (so a
        cached searcher is never taken for another generation of the same
        name): (folder, sha256 of its files.json as CURRENT records it), for
        a one-line CURRENT of an earlier version the sha256 of the files.json
        there, for the old flat layout the mtime of meta.json. Raises
        BadInput when there is no index or CURRENT is damaged."""
        from rag_cli.store.index_folder import current_pointer

        f = self.folder
        ptr = current_pointer(f.index_dir)
        try:
            if ptr is None:
                stamp = (f.index_dir, (f.index_dir / "meta.json").stat().st_mtime_ns)
            elif ptr.files_sha256 is not None:
                stamp = (ptr.path, ptr.files_sha256)
            else:
                stamp = (ptr.path, hashlib.sha256((ptr.path / "files.json").read_bytes()).hexdigest())
        except FileNotFoundError:
            if ptr is None:
                raise BadInput(f"{f.index_dir} has no index: run `rag index` first (project folder {f.root})") from None
            stamp = (ptr.path, None)  # vanished or damaged: Searcher.open says which
        return stamp

    def search_setup(self, options: dict[str, Any] | None = None, filter=None, *, for_ask: bool = False):
        """(config, searcher, mask) for a search with `options` ([search]
        keys, None = not given) and `filter` (expressions, `Searcher.mask`).
        `for_ask` loads both indexes (ask scores evidence with both)."""
        from rag_cli.index.searcher import check_mode

        config = self.folder.with_options("search", options)
        mode = check_mode(config.search.mode)
        parts = ("dense", "sparse") if for_ask or mode == "hybrid" else (mode,)
        searcher = self.searcher(config, with_embedder=mode != "sparse", parts=parts)
        return config, searcher, searcher.mask(filter)

    def ask_setup(self, options: dict[str, Any] | None = None, llm: dict[str, Any] | None = None,
                  search: dict[str, Any] | None = None, filter=None
                  ) -> tuple[AskConfig, SearchConfig, Any, Any, Any]:
        """(ask config, search config, searcher, mask, generator) for `ask`
        with `options` ([ask] keys), `llm` ([generator] keys) and `search`
        ([search] keys); None values are "not given"."""
        from rag_cli.generate.factory import load_generator

        config = self.folder.with_options("ask", options)
        config, _ = config.with_options("generator", llm)
        sconfig, s, mask = self.search_setup(search, filter, for_ask=True)
        if s.embedder is None:  # sparse retrieval: the evidence is still scored by the bi-encoder
            s.embedder = self.embedder(config)
        gen = load_generator(config.ask, s.embedder, s.sparse, config.generator, threads=config.model.threads)
        return config.ask, sconfig.search, s, mask, gen

    def ask_reader(self, options: dict[str, Any] | None = None):
        """The extractive QA reader of model.reader (`rag_cli.models.reader.Reader`),
        kept while the setting stays the same; None when no reader is set.
        `options`: [model] keys given for this call (`reader`)."""
        config = self.folder.with_options("model", options) if options else self.folder.config
        path = config.model.reader
        if not path:
            return None
        cached = getattr(self, "_reader", None)
        if cached is None or cached[0] != path:
            from rag_cli.models.reader import load_reader

            self._reader = (path, load_reader(path, threads=config.model.threads, provider=config.model.provider))
        return self._reader[1]

    def ask_reranker(self):
        """(question, [text]) -> (n,) float32 cross-encoder logits with
        model.reranker, for `ask` to rerank its evidence; None when no
        reranker is set."""
        config = self.folder.config
        if not config.model.reranker:
            return None
        ce = self.cross_encoder(config)
        return lambda question, texts: ce.score_pairs([(question, t) for t in texts])


def max_length(searcher) -> int | None:
    """The bi-encoder's max_length (tokens) of a searcher, None without one."""
    return searcher.embedder.folder.max_length if searcher.embedder is not None else None
