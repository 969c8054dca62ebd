"""The `semantic` strategy: break between sentences where the meaning shifts.

Greg Kamradt's method ("5 Levels of Text Splitting", 2024), as in LangChain's
`SemanticChunker` (langchain_experimental.text_splitter, percentile
breakpoints):

1. split into sentences (`sentence.sentence_units`);
2. embed each sentence (with `buffer` neighbours on each side; 0 by default,
   see below) with the bi-encoder;
3. distance_i = 1 - cos(e_i, e_{i+1}) between neighbouring sentences;
4. break after sentence i where distance_i > the `percentile`-th percentile
   of the document's distances (`numpy.percentile`, linear interpolation;
   95 by default, LangChain's default).

LangChain embeds each sentence with one neighbour on each side
(`buffer_size=1`). Neighbouring windows then share two of three sentences,
and at a topic change the three windows around it each swap one sentence of
the old topic for one of the new, so the largest distance can fall one
sentence off the change: on the two-topic English and Chinese texts of
tests/test_strategies.py, `buffer=1` put the break one sentence late
(English) and one early (Chinese); `buffer=0` put both exactly at the change.
rag-cli therefore embeds sentences alone by default.

Distances are taken within a section (a Markdown section, a BEIR body);
section ends are always breaks. A group longer than `size` units is split
with the recursive splitter, so sizes stay capped at `size`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .recursive import recursive_spans
from .sentence import sentence_units, sentence_windows
from .units import SpanCounter

__all__ = ["neighbour_distances", "semantic_breaks", "semantic_spans"]


def neighbour_distances(vectors: np.ndarray) -> np.ndarray:
    """(n - 1,) float32 cosine distances 1 - cos(v_i, v_{i+1}) of the rows of
    `vectors` ((n, d) float32, any norm); empty when n < 2."""
    if len(vectors) < 2:
        return np.zeros(0, dtype=np.float32)
    v = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return (1.0 - np.sum(v[:-1] * v[1:], axis=1)).astype(np.float32)


def semantic_breaks(distances: np.ndarray, percentile: float) -> np.ndarray:
    """Boolean mask over `distances` ((m,) float): True where the distance is
    above the `percentile`-th percentile (0-100, `numpy.percentile` with
    linear interpolation) of all of them, i.e. where to break."""
    if len(distances) == 0:
        return np.zeros(0, dtype=bool)
    return distances > np.percentile(distances, percentile)


def semantic_spans(text: str, sections: list[tuple[int, int, list[str]]], count: SpanCounter, size: int,
                   overlap: int, embed: Callable[[list[str]], np.ndarray], percentile: float,
                   buffer: int = 0) -> list[tuple[int, int, list[str]]]:
    """Chunk the `sections` (`(start, end, title_path)`) of `text`; return
    `(start, end, title_path)` per chunk in order.

    `embed` maps a list of n texts to (n, d) float32 vectors (the bi-encoder's
    `encode_passages`); it is called once per document with every sentence
    and its `buffer` neighbours. The percentile threshold is taken over all
    of the document's within-section distances.
    """
    per_section = [(sentence_units(text, a, b, count, size, overlap), path) for a, b, path in sections]
    windows = [w for units, _ in per_section for w in sentence_windows(units, buffer)]
    if not windows:
        return []
    vectors = np.asarray(embed([text[a:b] for a, b in windows]), dtype=np.float32)
    distances = []  # per section: its n - 1 neighbour distances (section ends are always breaks)
    row = 0
    for units, _ in per_section:
        distances.append(neighbour_distances(vectors[row:row + len(units)]))
        row += len(units)
    breaks = iter(semantic_breaks(np.concatenate(distances), percentile))
    out = []
    for units, path in per_section:
        first = 0
        for i in range(len(units)):
            # one mask entry per neighbouring pair within the section, in order
            if i == len(units) - 1 or next(breaks):
                for a, b in recursive_spans(text, units[first][0], units[i][1], count, size, overlap):
                    out.append((a, b, path))
                first = i + 1
    return out
