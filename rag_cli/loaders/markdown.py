"""Markdown reader: front matter → metadata, title, body text.

Front matter is a block at the very start between a `---` line and a `---`
(or `...`) line. Only simple `key: value` lines are parsed (values are strings;
`[a, b]` becomes a list of strings; surrounding quotes are removed); other lines
(nested YAML) are ignored and listed in `metadata["_front_matter_unparsed"]`.
The front matter is removed from the document text.
"""

from __future__ import annotations

import re

__all__ = ["split_front_matter", "markdown_title", "iter_headings", "parse_markdown"]

_KEY_VALUE = re.compile(r"^([A-Za-z0-9_][\w.-]*)[ \t]*:(?:[ \t]+(.*?))?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def split_front_matter(text: str) -> tuple[dict, str]:
    """Split normalised Markdown `text` into `(metadata, body)`.

    Returns `({}, text)` when there is no front matter block.
    """
    if not text.startswith("---\n"):
        return {}, text
    end = None
    pos = 4
    while True:
        nl = text.find("\n", pos)
        line = text[pos:] if nl < 0 else text[pos:nl]
        if line.rstrip() in ("---", "..."):
            end = len(text) if nl < 0 else nl + 1
            break
        if nl < 0:
            return {}, text  # never closed: not front matter
        pos = nl + 1
    block = text[4:pos]
    meta: dict = {}
    unparsed: list[str] = []
    for line in block.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _KEY_VALUE.match(line)
        if not m:
            unparsed.append(line)
            continue
        key, value = m.group(1), (m.group(2) or "")
        if value.startswith("[") and value.endswith("]"):
            meta[key] = [_unquote(x.strip()) for x in value[1:-1].split(",") if x.strip()]
        else:
            meta[key] = _unquote(value)
    if unparsed:
        meta["_front_matter_unparsed"] = unparsed
    return meta, text[end:]


def iter_headings(text: str):
    """Yield `(line_start, line_end, level, heading_text)` for each ATX heading
    (`#` … `######`) of `text`, skipping lines inside ``` / ~~~ code fences.

    `line_end` includes the line's `\\n` when there is one.
    """
    fence: str | None = None
    pos = 0
    n = len(text)
    while pos < n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl + 1
        line = text[pos:end].rstrip("\n")
        fm = _FENCE.match(line)
        if fence is not None:
            if fm and fm.group(1)[0] == fence[0] and len(fm.group(1)) >= len(fence) and not fm.group(2).strip():
                fence = None
        elif fm and not (fm.group(1)[0] == "`" and "`" in fm.group(2)):
            fence = fm.group(1)
        else:
            hm = _ATX.match(line)
            if hm:
                yield pos, end, len(hm.group(1)), (hm.group(2) or "").strip()
        pos = end


def markdown_title(body: str) -> str | None:
    """The first level-1 heading of `body`, else the first heading of any level,
    else None."""
    first_any = None
    for _s, _e, level, title in iter_headings(body):
        if not title:
            continue
        if level == 1:
            return title
        if first_any is None:
            first_any = title
    return first_any


def parse_markdown(text: str, stem: str) -> tuple[str, str, dict]:
    """Normalised Markdown file text → `(title, body, metadata)`."""
    meta, body = split_front_matter(text)
    title = meta.get("title")
    if not isinstance(title, str) or not title.strip():
        title = markdown_title(body) or stem
    return title.strip(), body, meta
