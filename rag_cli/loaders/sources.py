"""Resolve sources (files, folders, globs) and load them as documents."""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import os
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

from ..errors import BadInput
from .beir import is_beir_path, iter_beir_corpus
from .decode import DecodeFailed, check_encoding, decode_text, forced_problem
from .document import Document, LoadResult, Skipped
from .html import html_available, parse_html
from .markdown import parse_markdown
from .normalize import normalize_text
from .pdf import read_pdf
from .word import read_docx

__all__ = ["load_sources", "iter_sources", "source_files", "load_file", "no_documents", "without_chunks", "encoding_warning", "FORMATS", "EXTENSIONS",
           "CODE_EXTENSIONS"]

#: `fmt` values accepted by `load_sources`.
FORMATS = ("auto", "markdown", "text", "html", "pdf", "docx", "code", "beir")

#: Source-code file extensions, read as text documents with `fmt="code"`
#: (the `code` chunking strategy splits them at definitions).
CODE_EXTENSIONS = (
    ".py", ".pyi", ".js", ".mjs", ".jsx", ".ts", ".tsx", ".java", ".kt", ".scala", ".go", ".rs", ".c", ".h",
    ".cc", ".cpp", ".hpp", ".cs", ".swift", ".rb", ".php", ".lua", ".r", ".jl", ".sh", ".bash", ".sql",
)

#: File extension → reader, used when `fmt="auto"`.
EXTENSIONS = {
    ".md": "markdown", ".markdown": "markdown",
    ".txt": "text", ".text": "text", ".rst": "text",
    ".html": "html", ".htm": "html",
    ".pdf": "pdf", ".docx": "docx",
    **{ext: "code" for ext in CODE_EXTENSIONS},
}

#: Readers of binary formats: `fmt` → (reader(raw, stem) -> (title, text, metadata), module, package).
_BINARY_READERS = {
    "pdf": (read_pdf, "pdfplumber", "pdfplumber"),
    "docx": (read_docx, "docx", "python-docx"),
}

_GLOB_CHARS = set("*?[")

#: How many skipped files the "no documents" error names.
NAMED_SKIPPED = 10


def _fmt_of(path: str, fmt: str) -> str | None:
    if fmt != "auto":
        return fmt
    return EXTENSIONS.get(os.path.splitext(path)[1].lower())


def load_file(path: str, doc_id: str, fmt: str, encoding: str | None = None) -> Document | Skipped:
    """Load one file with reader `fmt` (`markdown`, `text`, `html`, `pdf`, `docx`
    or `code`; `code` is read as plain text, title = file stem). `encoding`
    forces the text encoding (see `decode_text`); None detects it.

    Returns a `Skipped` (never raises) for binary, undecodable or empty text
    files, and for corrupt, encrypted or text-less PDF/DOCX files.
    """
    try:
        raw, mtime = read_stable(path)
    except OSError as exc:
        return Skipped(path, f"cannot be read ({exc.strerror or exc})")
    stem = Path(path).stem
    meta: dict = {}
    others: list[str] = []
    problem = ""
    if fmt in _BINARY_READERS:
        reader, module, package = _BINARY_READERS[fmt]
        if importlib.util.find_spec(module) is None:
            return Skipped(path, f"{fmt.upper()} needs {package} (pip install {package})")
        if not raw:
            return Skipped(path, "empty file (0 bytes)")
        try:
            title, text, meta = reader(raw, stem)  # text already normalised by the reader
        except DecodeFailed as exc:
            return Skipped(path, str(exc))
        encoding = fmt  # no text encoding: the bytes are a PDF/DOCX container
    else:
        try:
            text, decoded_as, others = decode_text(raw, encoding)
        except DecodeFailed as exc:
            return Skipped(path, str(exc))
        problem = (forced_problem(text, decoded_as, raw) or "") if encoding is not None else ""
        encoding = decoded_as
        text = normalize_text(text)
        if fmt == "markdown":
            title, text, meta = parse_markdown(text, stem)
        elif fmt == "html":
            if not html_available():
                return Skipped(path, "HTML needs beautifulsoup4 (pip install beautifulsoup4)")
            title, text = parse_html(text, stem)
        else:
            title = stem
    if not text.strip():
        return Skipped(path, "no text (empty or whitespace only)")
    return Document(
        doc_id=doc_id, path=path, sha256=hashlib.sha256(raw).hexdigest(), mtime=mtime,
        n_chars=len(text), title=title, text=text, metadata=meta, fmt=fmt, encoding=encoding,
        other_encodings=tuple(others), encoding_problem=problem,
    )


#: Reads of a file that keeps changing while it is read, before its bytes are taken as they are.
STABLE_READS = 3


def read_stable(path: str) -> tuple[bytes, float]:
    """(the bytes of `path`, the mtime they belong to). The file's identity
    (mtime, size, inode) is taken before the read and compared after it; a
    file that changed meanwhile is read again (at most `STABLE_READS`
    times). The mtime returned is the one from before the read, so an edit
    that lands after the read leaves a newer mtime on disk, and the next
    `rag update` reads the file again instead of keeping old text under the
    new mtime. Raises OSError as reading does."""
    for _ in range(STABLE_READS):
        before = os.stat(path)
        raw = Path(path).read_bytes()
        after = os.stat(path)
        if ((before.st_mtime_ns, before.st_size, before.st_ino) == (after.st_mtime_ns, after.st_size, after.st_ino)
                and len(raw) == before.st_size):
            break
    return raw, before.st_mtime


def utf8_name(path: str) -> bool:
    """Whether `path` is valid UTF-8: a name with other bytes reaches Python
    with surrogate escapes (PEP 383), which docs.parquet (UTF-8) cannot store."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped_name(path: str) -> str:
    """`path` with the bytes that are not UTF-8 shown as `\\xNN` (printable, storable)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _walk(folder: str) -> list[str]:
    """All files under `folder`, recursively, sorted; hidden files and folders
    (names starting with '.') are left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(os.path.join(dirpath, f) for f in filenames if not f.startswith("."))
    return sorted(out, key=lambda p: PurePosixPath(Path(p).as_posix()).parts)


def _glob_root(pattern: str) -> str:
    """The longest leading folder of `pattern` without glob characters."""
    parts = Path(pattern).parts
    fixed = []
    for part in parts[:-1]:
        if _GLOB_CHARS & set(part):
            break
        fixed.append(part)
    return str(Path(*fixed)) if fixed else "."


def _nothing_there(source: str) -> BadInput:
    """The error for a source that is no file or folder, or a glob that matches no file."""
    if _GLOB_CHARS & set(source):
        return BadInput(f"source {source!r}: the glob matches no files; give existing files, folders or a glob "
                        "that matches some")
    return BadInput(f"source {source!r} does not exist; give existing files, folders or globs")


def check_sources(sources) -> None:
    """Raise BadInput, as reading them would, for a source that does not exist or a glob that matches
    no file, without reading any: a multi-stage command checks its sources before its model."""
    for source in map(str, sources):
        if not os.path.exists(source) and not (
                _GLOB_CHARS & set(source) and any(os.path.isfile(p) for p in glob.iglob(source, recursive=True))):
            raise _nothing_there(source)


def _expand(source: str) -> list[tuple[str, str]]:
    """`source` → list of `(file_path, doc_id)`; raises BadInput if nothing is there."""
    if os.path.isdir(source):
        return [(p, Path(os.path.relpath(p, source)).as_posix()) for p in _walk(source)]
    if os.path.isfile(source):
        return [(source, Path(source).name)]
    if _GLOB_CHARS & set(source):
        root = _glob_root(source)
        files = sorted(p for p in glob.glob(source, recursive=True) if os.path.isfile(p))
        if files:
            return [(p, Path(os.path.relpath(p, root)).as_posix()) for p in files]
    raise _nothing_there(source)


def _beir_corpus_of(folder: str) -> str:
    """The corpus file of a BEIR dataset folder (`corpus.jsonl` or `corpus.jsonl.gz`).

    Only the corpus is read: the queries and qrels beside it are not documents.
    Raises BadInput when the folder has neither.
    """
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise BadInput(f"--format beir: folder {folder!r} has no corpus.jsonl or corpus.jsonl.gz; "
                   "give the BEIR dataset folder or its corpus file")


def load_sources(sources: list[str], *, fmt: str = "auto", encoding: str | None = None,
                 known: Callable[[str, float], list[Document] | None] | None = None,
                 exclude: Sequence[str | os.PathLike] = ()) -> LoadResult:
    """Load documents from `sources` (files, folders searched recursively, or
    globs such as `docs/**/*.md`).

    `fmt="auto"` picks the reader by extension (`.md`/`.markdown` Markdown,
    `.txt`/`.text`/`.rst` text, `.html`/`.htm` HTML, `.pdf` PDF, `.docx`
    Word, `CODE_EXTENSIONS` source code as text with `fmt="code"`); a file
    source named `*.jsonl`/`*.jsonl.gz` is read as a BEIR corpus; other files
    are skipped with a reason.
    `fmt="markdown"|"text"|"html"|"pdf"|"docx"|"code"` forces one reader for every
    file; `fmt="beir"` reads each source file as a BEIR corpus, and a folder
    source as its `corpus.jsonl(.gz)` only (not its queries or qrels).
    `encoding` (flag `--encoding`) forces the text encoding of every text
    file (not of PDF/DOCX containers or BEIR corpora, which are UTF-8 JSON);
    None detects it per file, and a file whose detection was a guess gets a
    line in `LoadResult.warnings`.

    Returns a `LoadResult`: documents in source order (files sorted within a
    folder), and skipped files with reasons (unknown format, binary, not
    decodable, empty, corrupt/encrypted/image-only PDF, corrupt DOCX, the
    same file reached twice).

    `known(path, mtime)` (optional; `rag update`) may return the documents
    of a file already loaded before, whose mtime has not changed: they are
    taken as they are (in the same checks and order) and the file is not read.

    `exclude`: folders whose files are left out without a word (the project
    folder, when it lies inside a source).

    Raises `BadInput` when `fmt` is unknown (flag `--format`), `encoding` is
    not a text codec (flag `--encoding`), a source does
    not exist or a glob matches nothing, two files get the same `doc_id`, a
    BEIR corpus is malformed, or no documents are found at all.
    """
    docs: list[Document] = []
    skipped: list[Skipped] = []
    for item in iter_sources(sources, fmt=fmt, encoding=encoding, known=known, exclude=exclude):
        (skipped if isinstance(item, Skipped) else docs).append(item)
    if not docs:
        raise no_documents(sources, skipped)
    return LoadResult(docs, skipped, [w for w in map(encoding_warning, docs) if w])


def iter_sources(sources: list[str], *, fmt: str = "auto", encoding: str | None = None,
                 known: Callable[[str, float], list[Document] | None] | None = None,
                 exclude: Sequence[str | os.PathLike] = ()) -> Iterator[Document | Skipped]:
    """`load_sources` one file (or BEIR record) at a time: yields each
    `Document` or `Skipped` in the order `load_sources` returns them, holding
    only the doc ids and file paths seen. The flags are checked (BadInput)
    when this is called; a missing source, a doc id reached twice or a
    malformed BEIR corpus raises BadInput when it is reached. It does not
    raise for no documents: see `no_documents`."""
    if fmt not in FORMATS:
        raise BadInput(f"--format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")
    if not sources:
        raise BadInput("no sources given; give files, folders or globs to load")
    if encoding is not None:
        encoding = check_encoding(encoding)
    for source in sources:  # a missing path fails now, before any model or tokenizer is loaded
        if not os.path.exists(source) and not _GLOB_CHARS & set(source):
            _expand(source)
    if fmt == "beir":
        sources = [_beir_corpus_of(s) if os.path.isdir(s) else s for s in sources]
    return _iter_sources(sources, fmt, encoding, known, _excluded(exclude))


def _excluded(folders: Sequence[str | os.PathLike]) -> Callable[[str], bool]:
    """path -> whether it lies inside one of `folders` (symlinks resolved)."""
    prefixes = tuple(os.path.join(os.path.realpath(f), "") for f in folders)
    return lambda path: bool(prefixes) and os.path.realpath(path).startswith(prefixes)


def _iter_sources(sources: list[str], fmt: str, encoding: str | None,
                  known: Callable[[str, float], list[Document] | None] | None,
                  excluded: Callable[[str], bool] = lambda path: False) -> Iterator[Document | Skipped]:
    seen_files: dict[str, str] = {}
    id_owner: dict[str, str] = {}

    def checked(doc: Document) -> Document:
        other = id_owner.get(doc.doc_id)
        if other is not None:
            raise BadInput(f"doc_id {doc.doc_id!r} comes from both {other} and {doc.path}; give the sources "
                           "so that paths relative to their roots differ (e.g. their common parent folder)")
        id_owner[doc.doc_id] = doc.path
        return doc

    for source in sources:
        is_file_source = os.path.isfile(source)
        for path, doc_id in _expand(source):
            if excluded(path):
                continue
            if not utf8_name(path):
                yield Skipped(escaped_name(path), "the file name is not valid UTF-8 (its bytes are shown as \\xNN); "
                              "rename the file to chunk it")
                continue
            key = os.path.realpath(path)
            if key in seen_files:
                yield Skipped(path, f"already loaded (same file as {seen_files[key]})")
                continue
            seen_files[key] = path
            if known is not None:
                try:
                    reused = known(path, os.stat(path).st_mtime)
                except OSError:
                    reused = None
                if reused is not None:
                    for d in reused:
                        yield checked(d)
                    continue
            if fmt == "beir" or (fmt == "auto" and is_file_source and is_beir_path(path)):
                if fmt == "auto" or is_beir_path(path) or is_file_source:
                    for item in iter_beir_corpus(path):
                        yield item if isinstance(item, Skipped) else checked(item)
                else:
                    yield Skipped(path, "not a .jsonl/.jsonl.gz file (--format beir)")
                continue
            reader = _fmt_of(path, fmt)
            if reader is None:
                ext = os.path.splitext(path)[1].lower()
                if is_beir_path(path):
                    reason = "JSONL in a folder is not read by --format auto; give the file itself, or --format beir"
                else:
                    reason = f"unsupported file type {ext or '(no extension)'!r}; known: {', '.join(EXTENSIONS)}"
                yield Skipped(path, reason)
                continue
            result = load_file(path, doc_id, reader, encoding)
            yield result if isinstance(result, Skipped) else checked(result)


def source_files(sources: list[str], fmt: str = "auto", exclude: Sequence[str | os.PathLike] = ()) -> list[str]:
    """The files `load_sources(sources, fmt=fmt)` would read, paths as it
    gives them, without reading any: files of a known format (by extension
    under `fmt="auto"`), BEIR corpus files. A source that does not exist (or
    a glob that matches nothing) gives none instead of raising, so `rag
    status` can compare the sources with docs.parquet. Files inside the
    folders `exclude` are left out."""
    excluded = _excluded(exclude)
    out: list[str] = []
    for source in sources:
        try:
            if fmt == "beir":
                out.append(_beir_corpus_of(source) if os.path.isdir(source) else source)
                continue
            is_file_source = os.path.isfile(source)
            out.extend(path for path, _ in _expand(source)
                       if (_fmt_of(path, fmt) is not None or (is_file_source and is_beir_path(path)))
                       and not excluded(path) and utf8_name(path))
        except BadInput:
            continue
    return out


def no_documents(sources: list[str], skipped: list[Skipped]) -> BadInput:
    """The error for sources that gave no document: names each skipped file
    (the first `NAMED_SKIPPED`) with its reason."""
    from rag_cli.safe_text import one_line

    named = "; ".join(f"{one_line(s.path)}: {s.reason}" for s in skipped[:NAMED_SKIPPED])
    more = f"; and {len(skipped) - NAMED_SKIPPED} more" if len(skipped) > NAMED_SKIPPED else ""
    detail = f" ({len(skipped)} file(s) skipped: {named}{more})" if skipped else ""
    return BadInput(f"no documents found in {', '.join(map(repr, sources))}{detail}; "
                    "give Markdown, text, HTML, PDF, DOCX or source-code files, or a BEIR corpus with --format beir")


def without_chunks(doc: Document) -> Skipped:
    """`doc`, which chunking turned into no chunk, as a skipped file with the
    reason: a Markdown/HTML/DOCX text of headings only (headings are the
    chunks' `title_path`, never chunk text), a BEIR record with a title and
    no text (a title alone is never a chunk), or no text to chunk."""
    from .markdown import iter_headings

    text = doc.text
    if doc.metadata.get("body_start"):
        return Skipped(f"{doc.path} (record {doc.doc_id!r})", "only a title, no text")
    if doc.fmt in ("markdown", "html", "docx"):
        rest, pos = [], 0
        for hs, he, _level, _title in iter_headings(text):
            rest.append(text[pos:hs])
            pos = he
        if not "".join(rest + [text[pos:]]).strip():
            return Skipped(doc.path, "only headings, no text under them")
    return Skipped(doc.path, "no text to chunk")


def encoding_warning(doc: Document) -> str | None:
    """A line naming `doc`'s file when its encoding was a guess (the encoding
    chosen, the other plausible ones, the flag that forces one), or when the
    encoding `--encoding` forced gives text that looks wrong
    (`Document.encoding_problem`); else None."""
    from rag_cli.safe_text import one_line

    if doc.encoding_problem:
        return f"{one_line(doc.path)}: {doc.encoding_problem}"
    if not doc.other_encodings:
        return None
    return (f"{one_line(doc.path)}: the encoding is a guess: read as {doc.encoding}, but "
            f"{' and '.join(doc.other_encodings)} also give plausible text; if the text is wrong, give "
            f"--encoding (e.g. --encoding {doc.other_encodings[0]})")
