"""Text from documents made safe to print on a terminal.

Everything `rag` prints that comes from a document (a chunk, a title, a
question, an answer, a query id) goes through `plain` first and is then
printed as a literal `rich.text.Text`, never parsed as rich markup: a chunk
holding `[/bold]` or `[link=http://x]` prints those characters as they are.

`plain` removes what a terminal would act on rather than show:

* escape sequences: CSI (`ESC [ ... final`, and the 8-bit CSI 0x9b), OSC
  (`ESC ] ... BEL` or `ESC ] ... ESC \\`, e.g. hyperlinks and window titles),
  DCS/SOS/PM/APC strings (`ESC P|X|^|_ ... ESC \\`) and two-byte `ESC x`
  sequences (ECMA-48, 5th edition, sections 5.3-5.6);
* C0 and C1 control characters (U+0000-U+001F, U+007F-U+009F) except tab and
  line feed: BEL, backspace, carriage return (a lone CR would overwrite the
  line; CR LF becomes LF) and the like;
* bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which
  reorder what is shown (the "Trojan Source" trick, CVE-2021-42574).

`one_line` is for names (file paths, ids) and other text printed as one line
of a report (`rag status`): every such character, line feed and tab included,
is shown escaped (`\\n`, `\\t`, `\\r`, `\\x1b`, `\\u202e`), so a file named
`a<LF>up to date` prints as `a\\nup to date` and cannot forge a line.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL | ST
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC ... ST
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI params intermediates final
    r"|\x1b[ -~]?"  # ESC + one byte (and a stray ESC)
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def plain(text: str) -> str:
    """`text` (str) without escape sequences and control characters (see the
    module docstring); tab and line feed are kept. Idempotent."""
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub("", _ESCAPE.sub("", text))


_ESCAPED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    c = match.group()
    return _ESCAPED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def one_line(text: str) -> str:
    """`text` (a name, a path, a report line) on one line: control characters
    (C0 with line feed and tab, DEL, C1), U+2028/U+2029 and bidirectional overrides shown as
    escapes (`\\n`, `\\t`, `\\r`, `\\xNN`, `\\uNNNN`); backslashes are left
    as they are. An escape sequence loses its ESC (shown `\\x1b`), so it prints
    as characters and does nothing."""
    return _UNSHOWN.sub(_escaped, text)


def plain_text(text: str, style: str = ""):
    """`plain(text)` as a `rich.text.Text`: printed literally, markup never parsed."""
    from rich.text import Text

    return Text(plain(text), style=style)


class PlainStream:
    """`plain` for a text that arrives in pieces: `feed(piece)` passes the
    sanitised text on through `emit`, holding an escape sequence that may
    not be complete yet (the last one, when it reaches the end of what has
    arrived); `close()` passes on the rest. Everything emitted, concatenated,
    equals `plain` of the concatenated pieces."""

    def __init__(self, emit):
        self.emit = emit
        self._held = ""

    def feed(self, piece: str) -> None:
        text = self._held + piece
        last = None
        for last in _ESCAPE.finditer(text):
            pass
        self._held = ""
        if last is not None and last.end() == len(text):  # the sequence may go on
            text, self._held = text[:last.start()], text[last.start():]
        if text:
            self.emit(plain(text))

    def close(self) -> None:
        held, self._held = self._held, ""
        if held:
            self.emit(plain(held))
