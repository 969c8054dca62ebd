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


def check(text: str, numbers: set[int] | frozenset[int]) -> tuple[str, list[int], int]:
    """Keep the markers of `text` whose numbers are in `numbers` (the evidence
    numbers given), written as `[n]` (a list as `[n][m]`); remove the others.

    Returns (checked text, the valid numbers in order of first citation,
    how many cited numbers were removed).
    """
    cited: list[int] = []
    removed = 0

    def repl(m: re.Match) -> str:
        nonlocal removed
        keep = []
        for n in _numbers(m):
            if n in numbers:
                keep.append(n)
                if n not in cited:
                    cited.append(n)
            else:
                removed += 1
        return "".join(f"[{n}]" for n in keep)

    out = MARKER.sub(repl, text)
    if removed:  # no double spaces or a space before punctuation where a marker went
        out = re.sub(r"[ \t]+([.,;:!?。，；：！？])", r"\1", re.sub(r"[ \t]{2,}", " ", out)).strip()
    return out, cited, removed


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
