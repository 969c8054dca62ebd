"""An evidence check before answering (`ask.grade = "llm"`), after CRAG
(Yan et al., 2024, "Corrective Retrieval Augmented Generation"): the LLM
generator is asked whether the numbered sources contain the answer to the
question, and `rag ask` refuses when it says no.

* Base models (`api = "completions"`, the `llama-cpp` generator): a plain
  prompt (the numbered sources, the question, then "Do the sources contain
  the answer to the question? Answer:"), completed with at most
  `MAX_TOKENS` tokens at temperature 0, stopped at a line break.
* Chat models (`api = "chat"`): the same text as one user message.
* The reply's first word decides (`parse_grade`): yes / 是 / 有 / 能 ->
  "yes", no / 否 / 没 / 不 -> "no", anything else -> "unclear". Only "no"
  refuses; CRAG's third grade ("ambiguous") answers, as it does there.

The sources are those the generator would read, in its prompt's order and
token budget (`prompt.sources_text`, `prompt.fit_budget`).
"""

from __future__ import annotations

import re

from rag_cli.errors import BadInput
from rag_cli.generate.base import Evidence
from rag_cli.generate.prompt import fit_budget, sources_text

GRADES = ("off", "llm")
MAX_TOKENS = 3
REASON = "the generator judged that the sources do not answer the question"

#: one prompt for every language: the sources and the question keep theirs. Variants ending in
#: (the wording that a small base model completes with yes/no: docs/answers.md)
PROMPT = ("Sources:\n\n{sources}\n\nQuestion: {question}\n"
          "Do the sources contain the answer to the question? Answer:")
_YES = re.compile(r"^(?:yes\b|是|有|能|对)", re.I)
_NO = re.compile(r"^(?:no\b|not\b|否|没|不|无)", re.I)


def grade_prompt(question: str, evidence: list[Evidence]) -> str:
    """The grading prompt for `question` over `evidence` (already fitted)."""
    return PROMPT.format(sources=sources_text(evidence), question=question)


def parse_grade(text: str) -> str:
    """"yes", "no" or "unclear" from a reply's first word (quotes, asterisks and spaces ignored)."""
    head = text.strip().lstrip("\"'*“「 ")
    if _YES.match(head):
        return "yes"
    if _NO.match(head):
        return "no"
    return "unclear"


def check_grader(generator, setting: str) -> None:
    """Raise BadInput when `setting` (ask.grade) is unknown, or is "llm" with a
    generator that cannot write (the extractive one)."""
    if setting not in GRADES:
        raise BadInput(f"--grade {setting!r}: use one of {', '.join(GRADES)} (config ask.grade)")
    if setting == "llm" and not hasattr(generator, "complete"):
        raise BadInput(f"ask.grade = \"llm\" (--grade llm) needs an LLM generator: --generator openai or "
                       f"llama-cpp (the {generator.name} generator cannot grade); or --grade off")


def grade(generator, question: str, evidence: list[Evidence]) -> str:
    """The generator's grade of `evidence` for `question`: "yes", "no" or
    "unclear" (see the module docstring). The generator has
    `complete(prompt, max_tokens, temperature=, stop=)` (`check_grader`);
    raises WorkFailed as that does."""
    kept, _ = fit_budget(evidence, getattr(generator, "context_tokens", 2048))
    reply = generator.complete(grade_prompt(question, kept), MAX_TOKENS, temperature=0.0, stop=["\n"])
    return parse_grade(reply)
