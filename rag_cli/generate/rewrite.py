"""Query rewriting for `rag ask --rewrite` with an LLM generator.

* `multi-query`: the generator writes up to `n` other phrasings of the
  question, one a line (numbering and bullets are stripped, repeats of the
  question dropped);
* `hyde` (Gao et al., 2022, "Precise Zero-Shot Dense Retrieval without
  Relevance Labels"): the generator writes a short passage that would answer
  the question; it is embedded as a passage (not as a query) and searched
  with, as a hypothetical document.

The retrieval of each rewrite is fused with the original question's by RRF
(`rag_cli.index.fusion.rrf`) in `rag ask`; the original is always one of the
fused lists, and the gate and the cosines judge the original question.
A generator that can rewrite has `complete(prompt, max_tokens) -> str`.
"""

from __future__ import annotations

import re

from rag_cli.errors import BadInput
from rag_cli.generate.base import language

REWRITES = ("none", "multi-query", "hyde")

_PROMPTS = {
    ("multi-query", "en"): "Write {n} different search queries that ask the same as the question below, "
                           "one per line, without numbering or any other text.\n\nQuestion: {q}\nQueries:\n",
    ("multi-query", "zh"): "请用{n}种不同的说法改写下面的问题，用作搜索查询，每行一个，不要编号，不要其他内容。\n\n问题：{q}\n查询：\n",
    ("hyde", "en"): "Write a short encyclopedia passage (two or three sentences) that answers the question.\n\n"
                    "Question: {q}\nPassage:",
    ("hyde", "zh"): "写一段简短的百科文字（两三句话）回答下面的问题。\n\n问题：{q}\n文字：",
}
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)、:：]|[(（]\d+[)）])\s*")


def rewrite_prompt(method: str, question: str, n: int = 3) -> str:
    """The prompt asking for `method`'s rewrite of `question`, in its language."""
    return _PROMPTS[(method, language(question))].format(n=n, q=question)


def parse_queries(text: str, question: str, n: int) -> list[str]:
    """At most `n` queries from a generated `text`, one a line: bullets and
    numbering stripped, empty lines, repeats and the question itself dropped."""
    out: list[str] = []
    for line in text.splitlines():
        q = _BULLET.sub("", line).strip().strip("\"'“”")
        if q and q != question.strip() and q not in out:
            out.append(q)
    return out[:n]


def rewrite(generator, question: str, method: str, n: int = 3, max_tokens: int = 200) -> list[str]:
    """The rewrites of `question` by `generator` under `method` (see the module
    docstring): up to `n` queries for multi-query, one passage for hyde, none
    for "none" or an empty reply. Raises BadInput for an unknown method or a
    generator that cannot write (the extractive one)."""
    if method not in REWRITES:
        raise BadInput(f"--rewrite {method!r}: use one of {', '.join(REWRITES)}")
    if method == "none":
        return []
    if not hasattr(generator, "complete"):
        raise BadInput(f"--rewrite {method} needs an LLM generator to write the rewrites: "
                       f"--generator openai or llama-cpp (the {generator.name} generator cannot)")
    text = generator.complete(rewrite_prompt(method, question, n), max_tokens).strip()
    if method == "hyde":
        return [text] if text else []
    return parse_queries(text, question, n)
