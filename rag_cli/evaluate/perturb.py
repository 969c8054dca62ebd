"""Query perturbations for robustness checks: the queries changed one way,
searched again, and scored against the same qrels as the originals.

* `upper` / `lower`: `str.upper()` / `str.lower()` of the whole query
  (`case` asks for both).
* `typo`: one typo per query: two adjacent letters swapped (a transposition,
  the commonest typing slip; Damerau, "A technique for computer detection
  and correction of spelling errors", CACM 1964) inside a randomly chosen
  run of 4 or more letters, at a random place that keeps the run's first
  and last letter; the random generator is seeded with the seed and the
  query id, so a query's typo does not depend on the other queries. A query
  without such a run is left as it is (counted in `n_unchanged`). Han
  characters are letters (word characters of `re`), so in Chinese two adjacent characters of
  a clause swap.
* `punct`: every Unicode punctuation character (categories P*) removed and
  whitespace collapsed (a query of punctuation only is left as it is).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Sequence

KINDS = ("upper", "lower", "typo", "punct")
#: What a `--perturb` value asks for.
ALIASES = {"case": ("upper", "lower"), "upper": ("upper",), "lower": ("lower",), "typo": ("typo",),
           "punct": ("punct",)}
_LETTER_RUN = re.compile(r"[^\W\d_]{4,}")


def typo(text: str, rng: random.Random) -> str:
    """`text` with two adjacent interior letters of one 4+-letter run swapped (see the module docstring)."""
    runs = [m for m in _LETTER_RUN.finditer(text) if len(set(m.group()[1:-1])) > 1]
    if not runs:
        return text
    m = rng.choice(runs)
    word = m.group()
    choices = [i for i in range(1, len(word) - 2) if word[i] != word[i + 1]]
    i = rng.choice(choices)
    word = word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return text[:m.start()] + word + text[m.end():]


def strip_punct(text: str) -> str:
    """`text` without Unicode punctuation, whitespace collapsed; `text` itself if nothing would be left."""
    out = " ".join("".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text).split())
    return out or text


def perturb_queries(queries: Sequence[tuple[str, str]], kind: str, seed: int = 0) -> list[tuple[str, str]]:
    """(query_id, text) pairs changed by `kind` (one of KINDS). Raises ValueError for an unknown kind."""
    if kind == "upper":
        return [(q, t.upper()) for q, t in queries]
    if kind == "lower":
        return [(q, t.lower()) for q, t in queries]
    if kind == "typo":
        return [(q, typo(t, random.Random(f"{seed}:{q}"))) for q, t in queries]
    if kind == "punct":
        return [(q, strip_punct(t)) for q, t in queries]
    raise ValueError(f"unknown perturbation {kind!r}; known: {', '.join(KINDS)}")


def expand_kinds(values: Sequence[str]) -> list[str]:
    """`--perturb` values (case | upper | lower | typo | punct, repeated or
    comma-separated) -> the kinds, in KINDS order, each once. Raises
    ValueError naming an unknown value."""
    wanted: set[str] = set()
    for value in values:
        for v in value.split(","):
            v = v.strip()
            if v not in ALIASES:
                raise ValueError(f"--perturb {v!r}: use case, upper, lower, typo or punct")
            wanted.update(ALIASES[v])
    return [k for k in KINDS if k in wanted]
