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

    Reads files, folders (recursively; hidden files skipped) and globs: Markdown
    (YAML-style front matter becomes metadata; the title is `title:` or the first
    heading), plain text, HTML (scripts, styles, navigation dropped), PDF and
    DOCX (see below). A BEIR
    `corpus.jsonl(.gz)` (`--format beir`, or a `.jsonl` file given directly) keeps
    `_id` as `doc_id` and indexes `title + "\n\n" + text`. Unknown or binary files
    are skipped with a reason (when nothing is left, the error names each skipped
    file, first 10). Text is decoded (UTF-8, BOM, GBK/GB18030, UTF-16 by
    charset-normalizer; a guess that other encodings could also explain warns
    naming the file; `--encoding ENC` forces one, docs/inputs.md), line ends
    normalised and Unicode NFKC applied; queries get
    the same normalisation, so `ＡＰＩ` matches `API`. NFKC also folds Chinese
    full-width punctuation `，：；！？（）` to ASCII (`。` and `、` stay), so quoted
    evidence shows ASCII punctuation. `doc_id` is the path relative to the folder
    given; a BEIR dataset folder with `--format beir` reads only its
    `corpus.jsonl(.gz)`.

    Sizes are in tokens of the embedder's tokenizer (special tokens and the
    `passage: ` prefix not counted; a `--size` above what the model embeds whole
    warns) or characters. `recursive` splits by paragraph
    → line → table cell (a Markdown table row) → sentence end (`. ! ? 。 ！ ？ ；`)
    → comma (`, ，、`) → space → character and merges pieces up to the size,
    carrying up to `--overlap` units at piece boundaries. On Markdown, HTML and
    DOCX it follows the heading structure: `title_path` holds the headings and
    the embedded text starts with `A > B > C`. `start_char`/`end_char` index the
    normalised document text. A Markdown table split across chunks repeats its
    header lines in each part's embedded text (and `search` and `ask` show them
    above the part's text); its header lines are never a chunk without a row
    (docs/inputs.md). Chunking streams (files read, chunked and written a few at a
    time), so memory stays flat as the corpus grows (docs/inputs.md).

    ### Chunking strategies (`--strategy`)

    | strategy | flags (config key `chunk.*`) | one chunk is |
    | --- | --- | --- |
    | `recursive` (default) | `--size`, `--overlap`, `--unit` | paragraphs → lines → sentences → … merged up to `--size` (heading-aware on Markdown/HTML/DOCX) |
    | `fixed` | `--size`, `--overlap`, `--unit` | a window of exactly `--size` units, neighbours sharing `--overlap` |
    | `markdown` | `--size`, `--overlap`, `--unit` | a heading section, split by `recursive` when longer than `--size` |
    | `code` | `--size`, `--overlap`, `--unit` | Python: a top-level function or class with its decorators and the comments above it (`ast`), or the module-level code between two; other languages: blank-line blocks merged up to `--size`; an over-size unit is split by `recursive` |
    | `sentence` | `--context-sentences N` (2), `--size` | one sentence (ends `. ! ? 。 ！ ？ ；` or a blank line); `ask` reads it with N sentences on each side |
    | `parent-child` | `--size` (child), `--parent-size` (512), `--overlap` | a child of at most `--size` inside a parent of at most `--parent-size`; `ask` reads the parent |
    | `semantic` | `--breakpoint-percentile` (95), `--size` | a run of sentences, broken where the bi-encoder distance between neighbouring sentences exceeds that percentile; capped at `--size` |

    Source files (`.py`, `.js`, `.ts`, `.go`, `.rs`, `.java`, `.c`, … see
    `CODE_EXTENSIONS` in `rag_cli/loaders/sources.py`) are loaded as text with
    format `code`; `code` on other documents behaves as `recursive`.

    Small-to-big: `sentence` and `parent-child` chunks carry extra columns
    `context_start`, `context_end` and `context` (the window or the parent: the
    span and text in the document). Only the chunk is embedded and indexed;
    `rag ask` gives the generator `context` in its place, citations and
    `answers.contexts` still name the retrieved chunk ids, and the refusal
    rules are unchanged (the cosine is the chunk's; the term coverage is
    measured on the text the generator reads). Parents are stored in
    `parents.parquet` (the columns of `chunks.parquet`, ids `DOC#p0`, `DOC#p1`,
    …), and each child's `parent_id` names its parent, whose span contains the
    child's. Keeping parents out of `chunks.parquet` leaves `rag embed`, `rag
    index` and `rag search` unchanged (every row of `chunks.parquet` is a chunk
    to index) and `check_contract.py` passing; the `context` copy keeps `index/`
    self-contained. Another strategy removes a stale `parents.parquet`.

    `semantic` follows Greg Kamradt's method as in LangChain's `SemanticChunker`
    (percentile breakpoints, default 95, `numpy.percentile`), except that each
    sentence is embedded alone: with LangChain's one-sentence buffer on each
    side, the break on the two-topic texts of `tests/test_strategies.py` landed
    one sentence late (English) and one early (Chinese); alone, exactly at the
    topic change in both. Breaks are only within a section (Markdown heading,
    BEIR body).

    Measured on `sample_corpus/docs` (8 documents; `rag chunk sample_corpus/docs
    --strategy S --json`, default flags): recursive 41 chunks, sentence 239,
    parent-child 41 children in 34 parents, semantic 51 (39 s, nearly all
    embedding 239 sentences, int8, 2 shared cores); `code` on `rag_cli/` gives 586
    chunks from 50 modules in 5.3 s. With `--size 128`, `rag ask --queries
    sample_corpus/questions.jsonl` answers q1–q8 and refuses q9 with both
    `sentence` and `parent-child` (as with `recursive`); "今天天气怎么样？" and
    "1850年巴黎的天气怎么样？" are refused too (cosine 0.80–0.85, coverage 0.00–0.21).

    ### PDF and DOCX

    - **PDF** (pdfplumber): each page's lines in reading order (top to bottom,
      left to right; no column detection); ruled tables become Markdown tables
      (first row = header) at their place, their cells not repeated as text;
      pages joined by a blank line. Metadata: `n_pages`, `page_starts` (character
      offset of each page), PDF info `title`/`author`. The format is `pdf`, not
      heading-aware (a PDF line starting with `#` is text); a table has no blank
      line inside, so the recursive chunker keeps it whole when it fits and
      otherwise splits it between rows. Password-protected, corrupt and
      image-only PDFs (no text layer: OCR them first) are skipped with the reason.
      pdfplumber parses every character: a dense 20-page PDF (77,768 characters,
      17 tables) loads in 9.9 s, 0.5 s per page, on a shared 2-core machine
      (`python bench/pdf_loader.py`).
    - **DOCX** (python-docx): body paragraphs and tables in document order;
      `Heading N` styles (or a style's outline level, as localised heading styles
      have) become `#`×N headings, so `title_path` works; tables become Markdown
      tables (a merged cell's text once). Headers, footers, footnotes, comments and
      text boxes are not read. Title: core `title`, else the `Title` paragraph,
      else the first heading. Corrupt files are skipped with the reason.
    - Both go through the same NFKC normalisation as the other formats. Tests
      (`tests/test_loaders_pdf_docx.py`) build the files with reportlab and
      python-docx, including a Chinese PDF in reportlab's built-in CID font
      STSong-Light (no CJK TrueType font is needed or installed).
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

    Writes `embeddings.parquet` (`vector`: fixed-size list
    of float32; model fingerprint, name and dimension in the schema metadata).
    Vectors are cached by (model fingerprint, sha256 of the embedded text) in
    `PROJECT/cache/vectors/<fingerprint>/part-*.parquet`, one part written every
    16 batches, so a rerun embeds only new or changed chunks and a run killed
    half-way continues where it stopped (same batches, so fp32 vectors are
    bit-identical to an uninterrupted run). Chunks are read, embedded and written
    4,096 at a time (`ParquetWriter`), so memory does not grow with the corpus
    (only about 200 bytes of hash per chunk). Texts are batched by a token budget
    (1,024 padded tokens: small batches keep each layer's activations in the CPU
    caches: 7.4 passages/s against 6.5 at 8,192 on 200 SciFact passages), sorted
    by length so that padding is small; the order is restored.

    `--threads N` uses N cores (default: the cores
    this process may use; more than that is capped, since each batch in flight
    holds its activations) by running N batches at once, each on one onnxruntime
    thread, over one shared session: 2 cores, 200 SciFact passages, int8: 6.79
    passages/s against 6.59 with one batch at a time on 2 intra-op threads (a
    single batch, e.g. one query, then runs on one core; other providers run one
    batch at a time); `--provider cuda|coreml` runs on that onnxruntime
    execution provider when the installed onnxruntime has it (else exit 2 listing
    the ones it has). The cache is never pruned: delete `PROJECT/cache/` to
    reclaim space.

    Chunks longer than the
    model's `max_length` are never silently cut: the warning names them (first 10)
    with their token counts, `embeddings.parquet` has per-row `n_tokens` and
    `truncated`, a rerun from the cache reports them again, and `--on-truncate
    error` (config `model.on_truncate`) makes them exit 2 with nothing written
    (docs/inputs.md). Note: with
    the int8 model a vector depends very slightly on what else is in its batch
    (onnxruntime's dynamic quantisation scales activations per batch; cosine to the
    fp32 vector ≥ 0.99 either way); use `--precision fp32` for bit-reproducible
    vectors. Every batch is checked: a vector with NaN/inf or of norm zero, or
    near zero before normalisation (below 1e-4 of its token vectors' mean norm,
    or below 1e-6: rounding noise) (an fp16 export that overflows, a broken
    graph) fails the run (exit 1) naming the chunks; such vectors never enter
    the cache and `embeddings.parquet` is left as it was (docs/inputs.md).
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
    filters and cron / systemd recipes: \\[living-index.md](living-index.md).
    """
    from rag_cli.project import Project

    p = Project.open(project)
    with progress(quiet or json_out) as bar:
        out = as_dict(p.build(sources, format=fmt, ray=ray, progress=bar, **given(opts)))
    if json_out:
        return emit_json({stage: render.without_model(as_dict(s)) for stage, s in out.items()})
    if not quiet:
        render.built({stage: as_dict(s) for stage, s in out.items()}, p.index_dir)
