"""Citation markers: neutralised in evidence, checked in answers.

A citation marker is `[n]` or a list `[n, m]` (n, m decimal integers); the
full-width forms `【n】` and `［n］` that models write in Chinese count too.

* `neutralise(text)`: evidence text may itself hold `[3]` (a reference of the
  source document). Before any generator reads it, every marker-shaped
  bracket is rewritten with parentheses, `[3]` -> `(3)`, `[1, 2]` -> `(1, 2)`,
  `【3】` -> `(3)`, so no text of a document can pass for a citation.
* `check(text, numbers)`: every marker of an answer is checked against the
  evidence numbers actually given to the generator; a number outside them is
  removed (a list keeps its valid numbers) and counted.
* `statements(text)`: the answer split into statements (sentences with the
  markers that follow them), each with the numbers it cites.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMS = r"\d+(?:\s*[,，、]\s*\d+)*"
MARKER = re.compile(rf"\[\s*({_NUMS})\s*\]|【\s*({_NUMS})\s*】|［\s*({_NUMS})\s*］")
_SPLIT_NUMS = re.compile(r"\s*[,，、]\s*")
# a statement: up to a sentence end (。！？ or .!? before a space, a marker or the end),
# with the markers that follow it; the rest of the text is a last statement
_STATEMENT = re.compile(
    r"\S.*?(?:(?:[。！？]|[.!?](?=\s|\[|【|$))(?:\s*(?:\[[^\]\n]*\]|【[^】\n]*】))*|$)", re.S)


def _numbers(m: re.Match) -> list[int]:
    return [int(x) for x in _SPLIT_NUMS.split(next(g for g in m.groups() if g is not None))]


def neutralise(text: str) -> str:
    """`text` with every citation-shaped bracket rewritten with parentheses:
    `[3]` -> `(3)`, `[1, 2]` -> `(1, 2)`, `【3】` -> `(3)`."""
    return MARKER.sub(lambda m: "(" + next(g for g in m.groups() if g is not None) + ")", text)


_PUNCT = ".,;:!?。，；：！？"
_OPENERS = {"[": "]", "【": "】", "［": "］"}
# what may follow an opener while the text can still become a marker (a prefix of MARKER's inside)
_PREFIX = re.compile(r"\s*(?:\d+(?:\s*[,，、]\s*\d+)*\s*[,，、]?\s*)?")


def _keep(m: re.Match, numbers, cited: list[int]) -> tuple[str, int]:
    """The checked form of marker `m` ("" when none of its numbers is given)
    and how many of its numbers were removed; valid numbers are added to `cited`."""
    keep, removed = [], 0
    for n in _numbers(m):
        if n in numbers:
            keep.append(n)
            if n not in cited:
                cited.append(n)
        else:
            removed += 1
    return "".join(f"[{n}]" for n in keep), removed


def check(text: str, numbers: set[int] | frozenset[int]) -> tuple[str, list[int], int]:
    """Keep the markers of `text` whose numbers are in `numbers` (the evidence
    numbers given), written as `[n]` (a list as `[n][m]`); remove the others.

    Where a whole marker goes, no gap is left: the spaces and tabs before it
    go when punctuation, a line break or the end of the text follows
    (`claim [9].` -> `claim.`), the spaces after it when the text or a line
    starts there (`\n[9] Title` -> `\nTitle`) or spaces precede it (`a [9] b` -> `a b`). The result is stripped. `CitationStream`
    gives the same text from the pieces of a stream.

    Returns (checked text, the valid numbers in order of first citation,
    how many cited numbers were removed).
    """
    cited: list[int] = []
    removed = 0
    out: list[str] = []
    pos = 0
    for m in MARKER.finditer(text):
        out.append(text[pos:m.start()])
        kept, n = _keep(m, numbers, cited)
        removed += n
        pos = m.end()
        if kept:
            out.append(kept)
            continue
        done = "".join(out)
        post_end = pos + len(text[pos:]) - len(text[pos:].lstrip(" \t"))
        nxt = text[post_end:post_end + 1]
        if nxt in ("", "\n") or nxt in _PUNCT:
            done, pos = done.rstrip(" \t"), post_end
        elif not done.strip() or done.endswith("\n") or (done.endswith((" ", "\t")) and post_end > pos):
            pos = post_end
        out = [done]
    out.append(text[pos:])
    return "".join(out).strip(), cited, removed


class CitationStream:
    """`check` for a text that arrives in pieces (a streamed answer).

    `feed(piece)` passes on, through one call of `emit` (none when there is
    nothing), all the text that can no longer change: a marker is held from its opening bracket until it closes (then
    passed on checked) or cannot be a marker any more (then passed on as
    text); spaces are held until what follows them is known; `close()` passes
    on the rest. The concatenation of everything emitted equals
    `check(text.strip(), numbers)[0]` for the concatenated `text`, however it
    was split. `cited` and `removed` are as `check` returns them.
    """

    def __init__(self, numbers, emit):
        self.numbers, self.emit = frozenset(numbers), emit
        self.cited: list[int] = []
        self.removed = 0
        self._started = False  # anything emitted yet
        self._ws = ""  # whitespace after the last emitted text, not yet emitted
        self._marker = ""  # a possible marker, from its opening bracket
        self._after = None  # spaces after a removed marker (None: no marker was just removed)
        self._out: list[str] = []  # what this feed passes on, at its end

    def feed(self, piece: str) -> None:
        for ch in piece:
            self._char(ch)
        self._flush()

    def _flush(self) -> None:
        if self._out:
            text, self._out = "".join(self._out), []
            self.emit(text)

    def _char(self, ch: str) -> None:
        if self._marker:
            self._marker += ch
            opener = self._marker[0]
            if ch == _OPENERS[opener] and (m := MARKER.fullmatch(self._marker)):
                self._marker = ""
                self._checked(m)
            elif _PREFIX.fullmatch(self._marker, 1) is None:  # cannot be a marker: the opener is text
                held, self._marker = self._marker, ""
                self._text(opener)
                for c in held[1:]:
                    self._char(c)
            return
        if self._after is not None:
            if ch in " \t":
                self._after += ch
                return
            post, self._after = self._after, None
            if ch == "\n" or ch in _PUNCT:
                self._ws = self._ws.rstrip(" \t")
            elif self._started and not self._ws.endswith("\n") and not (self._ws.endswith((" ", "\t")) and post):
                self._ws += post
        if ch in _OPENERS:
            self._marker = ch
        elif ch.isspace():
            self._ws += ch
        else:
            self._text(ch)

    def _text(self, text: str) -> None:
        self._out.append((self._ws if self._started else "") + text)
        self._ws, self._started = "", True

    def _checked(self, m: re.Match) -> None:
        kept, n = _keep(m, self.numbers, self.cited)
        self.removed += n
        if kept:
            self._text(kept)
        else:
            self._after = ""

    def close(self) -> None:
        """Pass on what is held: an unclosed bracket as text; trailing whitespace is dropped."""
        held, self._marker = self._marker, ""
        if held:
            self._text(held[0])
            for c in held[1:]:
                self._char(c)
            self.close()
        self._flush()


@dataclass
class Statement:
    """One statement of an answer and the evidence numbers it cites; `uncited`
    is true when it cites none (a claim the sources do not visibly back)."""

    text: str
    citations: list[int] = field(default_factory=list)

    @property
    def uncited(self) -> bool:
        return not self.citations


def statements(text: str) -> list[Statement]:
    """The statements of a (checked) answer, in order; see the module docstring."""
    out = []
    for m in _STATEMENT.finditer(text):
        s = m.group(0).strip()
        if not s:
            continue
        nums: list[int] = []
        for mm in MARKER.finditer(s):
            nums += [n for n in _numbers(mm) if n not in nums]
        out.append(Statement(s, nums))
    return out


def check_answer(answer, evidence):
    """`answer` (an `Answer`) with its markers checked against the numbers of
    `evidence` (the `Evidence` given to the generator): invalid ones removed
    and counted in `n_citations_removed`, `citations` rebuilt as the chunk ids
    of the valid numbers, in order of first citation. A refusal keeps its text."""
    from dataclasses import replace

    by_number = {e.number: e.chunk_id for e in evidence}
    text, cited, removed = check(answer.text, frozenset(by_number))
    if answer.refused:
        return replace(answer, citations=[], n_citations_removed=answer.n_citations_removed + removed)
    ids = list(dict.fromkeys(by_number[n] for n in cited))
    return replace(answer, text=text, citations=ids, n_citations_removed=answer.n_citations_removed + removed)
