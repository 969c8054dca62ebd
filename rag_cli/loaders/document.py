"""The document record and the result of loading sources."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Document", "Skipped", "LoadResult"]


@dataclass(slots=True)
class Document:
    """One source document.

    - `doc_id`: stable id: the path relative to the source root with POSIX
      separators (a folder source: relative to that folder; a file source: its
      file name; a glob: relative to the glob's fixed leading folder), or the
      corpus `_id` for BEIR corpora.
    - `path`: the file the document came from (for BEIR: the corpus file).
    - `sha256`: hex SHA-256 of the raw bytes (BEIR: of the record's JSON line,
      without its line ending).
    - `mtime`: modification time of the file, float seconds since the epoch.
    - `n_chars`: `len(text)`, in characters of the normalised text.
    - `title`: front-matter `title`, first `#` heading, HTML `<title>`/`<h1>`,
      PDF info `Title`, DOCX core `title`/`Title` paragraph/first heading,
      BEIR title, else the file stem.
    - `text`: the normalised text (see `normalize_text`); all chunk offsets are
      offsets into this string.
    - `metadata`: Markdown front matter (`key: value`), BEIR `metadata`, and
      for BEIR `body_start` (where the record's `text` starts in `text`);
      PDF `n_pages`, `page_starts`, `title`, `author`; DOCX `title`, `author`.
    - `fmt`: the reader used: `markdown`, `text`, `html`, `pdf`, `docx`,
      `code` (source code, read as text) or `beir`.
    - `encoding`: the encoding the bytes were decoded with (`pdf`/`docx` for
      those containers, whose text is not decoded from a byte encoding).
    - `other_encodings`: other encodings that also decode the bytes into
      plausible but different text (the detection was a guess; empty when
      it was not, or when `--encoding` forced one).
    - `encoding_problem`: with `--encoding`, why the decoded text looks like
      the wrong encoding (`decode.forced_problem`), else `""`.
    """

    doc_id: str
    path: str
    sha256: str
    mtime: float
    n_chars: int
    title: str
    text: str
    metadata: dict = field(default_factory=dict)
    fmt: str = "text"
    encoding: str = "utf-8"
    other_encodings: tuple[str, ...] = ()
    encoding_problem: str = ""


@dataclass(slots=True, frozen=True)
class Skipped:
    """A file that was not loaded, and why (unknown format, binary, empty, ...)."""

    path: str
    reason: str


@dataclass(slots=True)
class LoadResult:
    """What `load_sources` returns: the documents, in a deterministic order
    (sources in the order given; files sorted by path within a source), and
    the files skipped with their reasons; `warnings`: one line per document
    whose encoding was a guess (naming the file, the encoding chosen and the
    other plausible ones)."""

    documents: list[Document]
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
