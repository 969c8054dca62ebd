"""Prompts for LLM generators: numbered sources, ordered against
lost-in-the-middle, cut to a token budget.

* Order (Liu et al., 2023, "Lost in the Middle: How Language Models Use Long
  Contexts"): models use the start and the end of a long context best, so the
  best-ranked evidence comes first, the second best last, the rest in rank
  order in between. Each source keeps its number [n] (its rank).
* Sources: `[n] Title: <headings or doc id>  Path: <doc id>` then the text, with
  citation-shaped brackets of the text neutralised (`citations.neutralise`).
* Instructions: answer only from the sources, cite `[n]` after each claim,
  answer in the question's language, and answer with the refusal sentence
  in that language ("Not found in the sources." / "资料中未提及。") when they
  do not hold the answer.
* Template: `ask.prompt` (`--prompt FILE`) replaces the built-in layout
  with the user's text (`PromptTemplate`: placeholders $instructions,
  $sources, $question, $refusal, $language; a `---` line splits the system
  message from the user message).
* Budget: `fit_budget` drops the lowest-ranked evidence until the sources fit
  `budget` tokens (at least the best one is kept, cut at the budget if it alone
  exceeds it); the caller reports how many were cut. Tokens are estimated
  without the model's tokenizer (`estimate_tokens`).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from rag_cli.errors import BadInput
from rag_cli.generate.base import Evidence, language, refusal
from rag_cli.generate.citations import neutralise
from rag_cli.loaders.normalize import has_cjk

INSTRUCTIONS = {
    "en": ("Answer the question using only the numbered sources below. After each claim, cite the source it "
           "comes from as [n]. Do not use any other knowledge. Answer in English. If the sources do not contain "
           "the answer, reply exactly: {refusal}"),
    "zh": ("只根据下面编号的资料回答问题。每个论断之后用 [n] 标明出处。不要使用资料以外的知识。用中文回答。"
           "如果资料中没有答案，只回答：{refusal}"),
}
LANGUAGES = {"en": "English", "zh": "Chinese (中文)"}
#: The placeholders of a prompt template (`PromptTemplate`).
PLACEHOLDERS = ("instructions", "sources", "question", "refusal", "language")


class PromptTemplate:
    """A user's prompt template (`ask.prompt`, `--prompt FILE`): text with
    `string.Template` placeholders, `$name` or `${name}` (`$$` is a `$`):

    * `$instructions`: the built-in instructions in the question's language
      (answer only from the sources, cite [n], answer in that language,
      refuse with the exact refusal sentence);
    * `$sources`: the numbered sources (`[n] Title: ...  Path: ...` and
      the text), in the prompt order, cut to the token budget;
    * `$question`; `$refusal`: the exact refusal sentence in the question's
      language ("Not found in the sources." / "资料中未提及。"), which `rag ask`
      recognises as a refusal; `$language`: "English" or "Chinese (中文)".

    A line `---` splits the template: above it the system message, below it
    the user message, for the chat API (without it, the whole text is one
    user message); the completions API gets both parts joined by a blank
    line, so end a completion template with an open line such as `Answer:`.
    """

    def __init__(self, text: str, source: str = "the prompt template"):
        from string import Template

        parts = re.split(r"(?m)^---[ \t]*$\n?", text, maxsplit=1)
        self.system, self.user = (parts[0].strip("\n"), parts[1].strip("\n")) if len(parts) == 2 else ("", text.strip("\n"))
        self.source = source
        self._templates = (Template(self.system), Template(self.user))
        dummy = {k: k for k in PLACEHOLDERS}
        for t in self._templates:
            try:
                t.substitute(dummy)
            except KeyError as exc:
                raise BadInput(f"{source}: unknown placeholder ${exc.args[0]}; a prompt template may use "
                               f"{', '.join('$' + k for k in PLACEHOLDERS)} ($$ for a dollar sign)") from None
            except ValueError as exc:
                raise BadInput(f"{source}: {exc}; write $$ for a dollar sign") from None
        if "sources" not in text and "question" not in text:
            raise BadInput(f"{source}: the template names neither $sources nor $question; the model would see "
                           "neither the sources nor the question")

    @classmethod
    def load(cls, path: str) -> "PromptTemplate":
        """The template in file `path`. Raises BadInput naming `--prompt` for a missing or unreadable file."""
        from pathlib import Path

        p = Path(path).expanduser()
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInput(f"--prompt {path} (config ask.prompt): cannot read the prompt template ({exc})") from None
        return cls(text, f"--prompt {path}")

    def values(self, question: str, evidence: list[Evidence]) -> dict[str, str]:
        lang = language(question)
        return {"instructions": INSTRUCTIONS[lang].format(refusal=refusal(question)),
                "sources": sources_text(evidence), "question": question, "refusal": refusal(question),
                "language": LANGUAGES[lang]}

    def chat(self, question: str, evidence: list[Evidence]) -> list[dict]:
        values = self.values(question, evidence)
        system, user = (t.substitute(values) for t in self._templates)
        return ([{"role": "system", "content": system}] if self.system else []) + \
            [{"role": "user", "content": user}]

    def completion(self, question: str, evidence: list[Evidence]) -> str:
        values = self.values(question, evidence)
        return "\n\n".join(t.substitute(values) for t, part in zip(self._templates, (self.system, self.user)) if part)


def load_template(path: str) -> "PromptTemplate | None":
    """The `PromptTemplate` of `ask.prompt` ("" -> None: the built-in prompt)."""
    return PromptTemplate.load(path) if path else None
#: Completion prompts (base models) end here; generation stops at these strings.
STOP = ["\nQuestion:", "\n问题：", "\nSources:", "\n\n\n", "<end_of_turn>", "</s>"]


def estimate_tokens(text: str) -> int:
    """An estimate of the tokens of `text` (int) for a multilingual BPE
    vocabulary: one per CJK character plus one per four other characters
    (rounded up). Close enough to budget a prompt; not the model's count."""
    cjk = sum(1 for ch in text if has_cjk(ch))
    return cjk + math.ceil((len(text) - cjk) / 4)


def order_for_prompt(evidence: list[Evidence]) -> list[Evidence]:
    """Rank-ordered `evidence` rearranged: best first, second best last, the rest between, in rank order."""
    if len(evidence) < 3:
        return list(evidence)
    return [evidence[0], *evidence[2:], evidence[1]]


def source_block(ev: Evidence) -> str:
    """One numbered source: header line (number, title, path) and the neutralised text."""
    title = " > ".join(ev.title_path) if ev.title_path else ev.doc_id
    return f"[{ev.number}] Title: {title}  Path: {ev.doc_id}\n{neutralise(ev.text).strip()}"


def fit_budget(evidence: list[Evidence], budget: int) -> tuple[list[Evidence], int]:
    """The rank-ordered `evidence` without its lowest-ranked pieces, so that
    their source blocks fit `budget` tokens (`estimate_tokens`). The best one is
    always kept (its text cut to the budget if needed). Returns (kept, n cut)."""
    kept, used = [], 0
    for ev in evidence:
        cost = estimate_tokens(source_block(ev)) + 1
        if kept and used + cost > budget:
            break
        kept.append(ev)
        used += cost
    if kept and used > budget:  # the best evidence alone is too long: cut its text
        ev = kept[0]
        chars = max(1, int(len(ev.text) * budget / used))
        while chars > 1 and estimate_tokens(source_block(replace(ev, text=ev.text[:chars]))) + 1 > budget:
            chars = max(1, int(chars * 0.9))  # the header counts too: cut until the block fits
        kept[0] = replace(ev, text=ev.text[:chars])
    return kept, len(evidence) - len(kept)


def shown_evidence(generator, evidence: list[Evidence]) -> tuple[list[Evidence], int]:
    """The evidence a generator is shown: `fit_budget(evidence,
    generator.context_tokens)` for one with a token budget (the LLM
    generators), else all of it. Fitting what already fits changes nothing,
    so the generator's own `fit_budget` of the result keeps it whole.
    Returns (shown, n cut)."""
    budget = getattr(generator, "context_tokens", None)
    if budget is None:
        return list(evidence), 0
    return fit_budget(evidence, budget)


def sources_text(evidence: list[Evidence]) -> str:
    return "\n\n".join(source_block(e) for e in order_for_prompt(evidence))


def chat_messages(question: str, evidence: list[Evidence], template: PromptTemplate | None = None) -> list[dict]:
    """OpenAI chat messages: the instructions (system) and the sources with
    the question (user); or those of the user's `template`."""
    if template is not None:
        return template.chat(question, evidence)
    lang = language(question)
    system = INSTRUCTIONS[lang].format(refusal=refusal(question))
    label = ("资料", "问题") if lang == "zh" else ("Sources", "Question")
    user = f"{label[0]}:\n\n{sources_text(evidence)}\n\n{label[1]}: {question}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def completion_prompt(question: str, evidence: list[Evidence], template: PromptTemplate | None = None) -> str:
    """A plain-text prompt for a base model: instructions, sources, the
    question, and an open `Answer:` line (generation stops at `STOP`); or
    the user's `template`, its two parts joined by a blank line."""
    if template is not None:
        return template.completion(question, evidence)
    lang = language(question)
    label = ("资料", "问题", "回答") if lang == "zh" else ("Sources", "Question", "Answer")
    colon = "：" if lang == "zh" else ": "
    return (INSTRUCTIONS[lang].format(refusal=refusal(question)) + "\n\n"
            f"{label[0]}{colon}\n\n{sources_text(evidence)}\n\n"
            f"{label[1]}{colon}{question}\n{label[2]}{colon}")
