"""Text normalisation shared by documents and queries.

`normalize_text` is the single place where text is normalised: loaders apply
it to every document, and search/ask should apply it to queries so that both
sides get the same treatment.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_text", "CJK", "has_cjk"]

#: Character-class body of CJK ideographs (Unified, Extension A, compatibility,
#: Extensions B+), for building regexes: `re.compile(f"[{CJK}]")`.
CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAS_CJK = re.compile(f"[{CJK}]")


def has_cjk(text: str) -> bool:
    """True if `text` contains a CJK ideograph (Chinese, also kanji/hanja)."""
    return _HAS_CJK.search(text) is not None


def normalize_text(s: str) -> str:
    """Return `s` normalised: a leading BOM dropped, CRLF and CR turned into
    LF, then Unicode NFKC.

    NFKC folds compatibility forms, so full-width ASCII punctuation becomes
    ASCII (`，` → `,`, `！` → `!`, `？` → `?`, `；` → `;`, `Ａ` → `A`) while
    `。` and `、` stay. Offsets of chunks are offsets in the *normalised* text;
    the length can differ from the input (`ﬁ` → `fi`).
    """
    if s.startswith("\ufeff"):
        s = s[1:]
    if "\r" in s:
        s = s.replace("\r\n", "\n").replace("\r", "\n")
    if not s.isascii():
        s = unicodedata.normalize("NFKC", s)
    return s
