"""An extractive generator: the evidence sentences that best match the
question, each followed by its citation [n]. Needs no LLM and cannot say
anything the sources do not say.

A sentence's score is

    cos(question, sentence + its next sentence)
    + lexical_weight * share(question terms in the sentence)
    + type_weight * [the question asks for a number or date and the sentence has one]
    + subject_weight * [an English question's subject is in the sentence's window]

* The cosine is the bi-encoder's (the question as a query, the text as a
  passage); the window (`context`) gives a short sentence its meaning.
* The share is over the question's analyzed BM25 terms (jieba words,
  stemmed English words), question words aside (`QUESTION_WORDS`), each
  weighted by its index idf times a local idf over the candidate sentences,
  ln(1 + n / (1 + n_t)) for n sentences of which n_t hold the term. The
  subject of the question is in most of the evidence sentences, so it
  weighs little; the terms that single out the asked-for fact ("1973年10月",
  "总部") weigh most. Without the local factor the definition of the subject
  ("王家瑞，河北秦皇岛人。") wins over the sentence holding the fact.
* Subject (English): `subject_weight` when the sentence with its window
  holds every term of the question's subject (`spans.question_subject`:
  "What does ef control?" -> "ef"), so that a sentence about the subject
  beats one that shares only the verb ("k1 controls ...").
* Answer type: 多少/几/多高/how many... ask for a number, 何时/哪一年/when...
  for a date (`answer_type`); numbers the question itself contains do not
  count.

The answer is as short as the question needs (`ExtractiveGenerator.choose`):

* the best sentence, and, when the question asks more than one thing
  (`asks_several`), a further one (within `margin` of the best, up to
  `max_sentences`) only when it holds at least `add_share` of the
  question's weighted terms that the sentences chosen before lack: a
  second part of the question ("... and what is its usual default?"), not
  a neighbour that shares the same words;
* for a one-sentence answer to a question that asks for a date, a number,
  a person, a place or a thing, the smallest unit of the sentence that the
  span answerer is sure of (`rag_cli.generate.spans.answer_unit`): the
  phrase that holds it when its evidence is strong, else the sentence cut
  to 20 words around it; quoted verbatim with the sentence's citation;
  `Answer.support` keeps the full sentence.

Markdown marks of the document (`**k1**`, `` `ef` ``) are removed from the
quoted text (`spans.strip_marks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rag_cli.generate.base import Answer, Evidence, language
from rag_cli.generate.gate import QUESTION_WORDS, holds_term
from rag_cli.generate.spans import answer_unit, question_subject, strip_marks
from rag_cli.loaders.normalize import CJK, normalize_text

# Blocks: paragraphs, and lines that start a list item, heading or table row.
_BLOCK = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+>#|]|\d+[.)]\s))")
# A sentence ends at 。！？； or at . ! ? followed by white space or the end.
# A line break next to a CJK character (or CJK punctuation) joins without a space.
_CJK_BREAK = re.compile(rf"(?<=[{CJK}\u3000-\u303f\uff00-\uffef])\s*\n\s*|\s*\n\s*(?=[{CJK}])")
_END = re.compile(r"[。！？；.!?:：;]$")
_SENTENCE = re.compile(r".*?(?:[。！？；]|[.!?](?=\s|$)|$)", re.S)


#: a line that is page furniture, no evidence: a page number ("2", "- 2 -", "Page 2", "Page 2 of 9", "2 / 9",
#: "第 2 页", "p. 2"), a table separator ("|---|---|", "----") or a form feed (a page break of a PDF's text)
_FURNITURE = re.compile(r"^\s*(?:[-–—]?\s*\d{1,4}\s*[-–—]?|(?:page|p\.|pg\.?)\s*\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?"
                        r"|\d{1,4}\s*/\s*\d{1,4}|第\s*\d{1,4}\s*页(?:\s*[/，,]?\s*共\s*\d{1,4}\s*页)?"
                        r"|\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?|[=_*·•.\s]{3,})\s*$", re.I)
#: list numbering at the start of a line ("1. ", "2) ", "(3) ", "a) ", "- ", "• "): not part of the sentence
_LIST_MARK = re.compile(r"^\s*(?:\(?\d{1,3}[.)]|\(?[a-z][)]|[-*+•·])\s+", re.I)


def strip_furniture(text: str) -> str:
    """`text` without page furniture (`_FURNITURE` lines: page numbers and "Page N" headers or footers, table
    separators; a form feed ends a line) and without list numbering at the start of a line; a heading stays
    (`split_sentences` drops a heading alone)."""
    lines = []
    for line in text.replace("\f", "\n").split("\n"):
        if _FURNITURE.match(line):
            continue
        lines.append(_LIST_MARK.sub("", line) if _LIST_MARK.match(line) and line.strip()[:1] not in "|#" else line)
    return "\n".join(lines)


def split_sentences(text: str, min_chars: int = 5) -> list[str]:
    """Split `text` into sentences (str), dropping those under `min_chars` characters.

    A single line break inside a paragraph (hard-wrapped text) does not end a
    sentence; a blank line, a list item, a heading or a table row does.
    Headings, table rows, code fences, lead-ins ending in a colon and short
    lines without final punctuation are not sentences and are dropped; so are
    page furniture lines and list numbering (`strip_furniture`): "Page 2" above
    a sentence never becomes part of it.
    """
    out = []
    for block in _BLOCK.split(text):
        block = " ".join(_CJK_BREAK.sub("", strip_furniture(block)).split())
        for m in _SENTENCE.finditer(block):
            s = m.group(0).strip()
            if len(s) < min_chars or s.startswith(("```", "#", "|")) or s.endswith((":", "：")):
                continue
            if len(s) < 40 and not _END.search(s):  # a bare heading or label
                continue
            out.append(s)
    return out


_NUMBER_Q = re.compile(r"多少|几|多高|多长|多大|多重|多久|多远|多深|多宽|多厚|\bhow (?:many|much|long|old|far|tall|high|large|big)\b",
                       re.I)
_DATE_Q = re.compile(r"何时|什么时候|哪一年|哪年|哪一天|哪天|哪个月|\bwhen\b|\bwhat year\b|\bwhich year\b", re.I)
_NUMBER = re.compile(r"\d|[一二三四五六七八九十百千万亿两]+[个名座条种岁米年次位人所家]")
_DATE = re.compile(r"\d+\s*[年月日]|世纪|年代|(?<!\d)(?:1[0-9]|20)\d\d(?!\d)")


def answer_type(question: str) -> str | None:
    """'date', 'number' or None: what kind of fact `question` asks for (a date
    question is checked first: 哪一年 asks for a date, not any number)."""
    if _DATE_Q.search(question):
        return "date"
    if _NUMBER_Q.search(question):
        return "number"
    return None


def has_answer_type(sentence: str, kind: str | None, question: str) -> bool:
    """Whether `sentence` holds a fact of `kind` ('date', 'number'; None ->
    False), not counting the digit runs that `question` contains."""
    if kind is None:
        return False
    asked = set(re.findall(r"\d+", question))
    rest = re.sub(r"\d+", lambda m: "" if m.group(0) in asked else m.group(0), sentence)
    return bool((_DATE if kind == "date" else _NUMBER).search(rest))


def term_shares(question: str, sentences: list[str], analyze: Callable[[str], list[str]],
                idf: Callable[[list[str]], dict[str, float]]) -> np.ndarray:
    """(n,) float32 in [0, 1]: per sentence, the weighted share of the question's
    terms it holds, each term weighted by idf * ln(1 + n / (1 + n_t)) (see the
    module docstring); zeros when the question has no terms but question words."""
    terms = sorted(set(analyze(question)) - QUESTION_WORDS)
    if not terms or not sentences:
        return np.zeros(len(sentences), dtype=np.float32)
    held = np.zeros((len(sentences), len(terms)), dtype=np.float32)
    for i, s in enumerate(sentences):
        low = normalize_text(s).lower()
        words = set(analyze(low))
        held[i] = [holds_term(t, low, words) for t in terms]
    idf_of = idf(terms)
    weights = np.array([idf_of[t] for t in terms], dtype=np.float32)
    weights *= np.log1p(len(sentences) / (1.0 + held.sum(axis=0)))
    total = float(weights.sum())
    return held @ weights / total if total > 0 else np.zeros(len(sentences), dtype=np.float32)


_SEVERAL = re.compile(r"\b(?:and|or|also)\s+(?:what|which|who|whom|when|where|why|how)\b|\?.*\?"
                      r"|[，,;；]\s*(?:what|which|who|when|where|why|how)\b|(?:以及|并且|还有|和).{0,12}"
                      r"(?:什么|哪|谁|何时|多少|几|为什么|怎么|如何)", re.I | re.S)


def asks_several(question: str) -> bool:
    """Whether `question` asks more than one thing ("What does b control, and
    what is its default?", two question marks, "……以及……是什么"): only then
    may an answer quote a second sentence."""
    return bool(_SEVERAL.search(question))


_FUNCTION_TERMS: dict[int, frozenset] = {}


def content_terms(question: str, analyze: Callable[[str], list[str]]) -> list[str]:
    """The question's analyzed terms less question words (`QUESTION_WORDS`)
    and English function words (what, does, it, ...: `spans` lists them), sorted."""
    key = id(analyze)
    if key not in _FUNCTION_TERMS:
        from rag_cli.generate.spans import _FUNCTION

        _FUNCTION_TERMS[key] = frozenset(analyze(" ".join(_FUNCTION)))
    return sorted(set(analyze(question)) - QUESTION_WORDS - _FUNCTION_TERMS[key])


def key_term_share(question: str, sentence: str, analyze: Callable[[str], list[str]],
                   idf: Callable[[list[str]], dict[str, float]]) -> float:
    """The idf-weighted share (0-1) of the question's terms, question words
    aside, that `sentence` holds (1.0 for a question without such terms)."""
    terms = content_terms(question, analyze)
    if not terms:
        return 1.0
    low = normalize_text(sentence).lower()
    words = set(analyze(low))
    weights = idf(terms)
    total = sum(weights[t] for t in terms)
    return sum(weights[t] for t in terms if holds_term(t, low, words)) / total if total > 0 else 1.0


#: a qualifier of a question, by kind: a version ("version 2.0", "v2", "release 3.1"), a year ("in 1998"), a
#: model or product name with digits ("X200"); the evidence that carries it answers the question (`qualifiers`)
_QUALIFIERS = {
    "version": re.compile(r"(?<![\w.])(?:version|release|v)\s?(\d+(?:\.\d+)*)(?![\w]|\.\d)", re.I),
    "year": re.compile(r"(?<![\w.,])((?:1[5-9]|20)\d\d)(?![\w.,]\d|\w)"),
    "name": re.compile(r"(?<![\w.-])([A-Z]+-?\d+[A-Za-z\d]*)(?![\w.-])"),
}


#: a value a sentence states: a number (a version or year too), the thing two sources may disagree on
_VALUE = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")


def qualifiers(text: str) -> list[tuple[str, str]]:
    """The qualifiers `text` names, as (kind, value lower-cased): "What does X default to in version 2.0?"
    -> [("version", "2.0")]; "the X200" -> [("name", "x200")]."""
    out = []
    for kind, pattern in _QUALIFIERS.items():
        for m in pattern.finditer(text):
            q = (kind, m.group(1).lower())
            if q not in out:
                out.append(q)
    return out


def _holds_qualifier(sentence: str, qualifier: tuple[str, str]) -> bool:
    """Whether `sentence` names `qualifier` ((kind, value)) as a whole token ("2.0" is not in "12.0")."""
    return qualifier in qualifiers(sentence)


def _names_another(sentence: str, qualifier: tuple[str, str]) -> bool:
    """Whether `sentence` names a qualifier of the same kind with another value ("version 1.0" for 2.0)."""
    return any(k == qualifier[0] and v != qualifier[1] for k, v in qualifiers(sentence))


def stated_values(sentence: str, question: str) -> set[str]:
    """The numbers `sentence` states that `question` does not hold (the values two sources may disagree on)."""
    asked = set(_VALUE.findall(question)) | {v for _, v in qualifiers(question)}
    return {v for v in _VALUE.findall(sentence) if v not in asked}


@dataclass
class Ranked:
    """The candidate sentences of some evidence, scored for a question:
    `sentences[i]` from `evidence[i]`, `scores` (n,), `order` best first."""

    sentences: list[str]
    evidence: list[Evidence]
    scores: np.ndarray
    order: np.ndarray
    shares: np.ndarray  # the weighted share of question terms per sentence (`term_shares`)

    def __bool__(self) -> bool:
        return bool(self.sentences)


class ExtractiveGenerator:
    """Answer with the evidence sentence that best matches the question,
    cited, or the phrase of it that holds what the question asks for.

    Args:
        encode_query: str -> (d,) float32 unit vector.
        encode_passages: list[str] -> (n, d) float32 unit vectors.
        analyze: text -> its BM25 terms (`rag_cli.index.sparse.analyze`).
        idf: [term] -> {term: idf} (`SparseIndex.idf`).
        max_sentences: how many sentences at most.
        margin: a further sentence is considered only when its score >= best - margin.
        lexical_weight: weight of the weighted share of question terms in a sentence.
        type_weight: bonus of a sentence holding the number or date asked for.
        context: the cosine of a sentence is taken over its section heading (the
            last of `Evidence.title_path`), it and the `context` sentences that follow it (a sentence alone is often too short for
            its meaning: "ef is the size of the candidate list ... It is the
            main knob for ..."); only the sentence itself is quoted.
        add_share: a second sentence is quoted only when it holds at least
            this weighted share of the question's terms that the first one
            lacks (it adds something the question asked for, not a neighbour
            that shares its words).
        spans: quote, for a question that asks for a date, a number, a person,
            a place or a thing, the phrase or clause of the sentence that holds
            it (`rag_cli.generate.spans`); the full sentence stays in `Answer.support`.
        conflict_margin: sentences within this of the best score may carry the question's qualifier or
            disagree with the best (`disagree`).
        conflict_share: a disagreeing sentence holds at least this weighted share of the question's terms.

    Sentence vectors are kept (up to `cache_size` texts), so a long-lived
    generator encodes each evidence sentence once.
    """

    name = "extractive"

    def __init__(self, encode_query: Callable[[str], np.ndarray],
                 encode_passages: Callable[[list[str]], np.ndarray],
                 analyze: Callable[[str], list[str]], idf: Callable[[list[str]], dict[str, float]],
                 max_sentences: int = 3, margin: float = 0.03, lexical_weight: float = 0.15,
                 type_weight: float = 0.05, context: int = 1, add_share: float = 0.3, spans: bool = True,
                 cache_size: int = 20000, subject_weight: float = 0.05, add_margin: float = 0.05,
                 conflict_margin: float = 0.03, conflict_share: float = 0.6):
        self.encode_query = encode_query
        self.encode_passages = encode_passages
        self.analyze = analyze
        self.idf = idf
        self.max_sentences = max_sentences
        self.margin = margin
        self.lexical_weight = lexical_weight
        self.type_weight = type_weight
        self.context = context
        self.add_share = add_share
        self.add_margin = add_margin
        self.subject_weight = subject_weight
        self.conflict_margin = conflict_margin
        self.conflict_share = conflict_share
        self.spans = spans
        self.cache_size = cache_size
        self.vectors: dict[str, np.ndarray] = {}
        self._query: tuple[str, np.ndarray] | None = None

    def _encode_query(self, question: str) -> np.ndarray:
        if self._query is None or self._query[0] != question:
            self._query = (question, self.encode_query(question))
        return self._query[1]

    def _encode(self, texts: list[str]) -> np.ndarray:
        todo = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if todo:
            if len(self.vectors) + len(todo) > self.cache_size:
                self.vectors.clear()
            self.vectors.update(zip(todo, self.encode_passages(todo)))
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, 1), dtype=np.float32)

    def scores(self, question: str, sentences: list[str], windows: list[str]) -> np.ndarray:
        """(n,) float32: the score of each sentence (module docstring); `windows`
        are the texts whose cosine is taken (the sentence and its context)."""
        return self._scores(question, sentences, windows)[0]

    def _scores(self, question: str, sentences: list[str], windows: list[str]) -> tuple[np.ndarray, np.ndarray]:
        q = self._encode_query(question)
        score = self._encode(windows) @ q
        shares = term_shares(question, sentences, self.analyze, self.idf)
        score = score + self.lexical_weight * shares
        subject = question_subject(question) if self.subject_weight else ""
        if subject:  # "What does ef control?": a sentence about ef, not one that shares only "control"
            terms = [t for t in set(self.analyze(subject.lower())) if t not in QUESTION_WORDS]
            held = []
            for w in windows:
                low = normalize_text(w).lower()
                words = set(self.analyze(low))
                held.append(all(holds_term(t, low, words) for t in terms) if terms else False)
            score = score + self.subject_weight * np.array(held, dtype=np.float32)
        kind = answer_type(question)
        if kind is not None and self.type_weight:
            score = score + self.type_weight * np.array(
                [has_answer_type(s, kind, question) for s in sentences], dtype=np.float32)
        return score, shares

    def rank(self, question: str, evidence: list[Evidence]) -> Ranked:
        """The candidate sentences of `evidence` (each once, Markdown marks
        removed), scored and ordered for `question`."""
        sentences: list[str] = []
        owners: list[Evidence] = []
        windows: list[str] = []
        seen: set[str] = set()
        for ev in evidence:
            split, heads = [], []
            # the section heading the sentence stands under says what it is about ("The two parameters" above
            # "b controls ...": the b parameter); it is read with the sentence, never quoted: the last of the
            # chunk's title path, or a heading line of the text itself (a short line without final punctuation)
            heading = strip_marks(ev.title_path[-1]).strip() if ev.title_path else ""
            for block in _BLOCK.split(ev.text):
                line = " ".join(strip_furniture(block).split()).lstrip("#").strip()
                if line and len(line) < 40 and not _END.search(line) and not line.startswith(("|", "```")):
                    heading = strip_marks(line)
                    continue
                got = [strip_marks(x) for x in split_sentences(block)]
                split += got
                heads += [heading + ": " if heading else ""] * len(got)
            for i, sentence in enumerate(split):
                if sentence not in seen:
                    seen.add(sentence)
                    sentences.append(sentence)
                    owners.append(ev)
                    windows.append(heads[i] + " ".join(split[i:i + 1 + self.context]))
        if not sentences:
            empty = np.zeros(0, dtype=np.float32)
            return Ranked([], [], empty, np.zeros(0, dtype=np.int64), empty)
        score, shares = self._scores(question, sentences, windows)
        return Ranked(sentences, owners, score, np.argsort(-score, kind="stable"), shares)

    def signals(self, question: str, ranked: Ranked) -> dict:
        """What the refusal gate reads of the sentence that would be quoted
        (the best candidate): `answer_terms` (the idf-weighted share of the
        question's terms it holds, `key_term_share`), `answer_type` (1.0 when
        the question asks for a number or date and the sentence has one, 0.0
        when it lacks it, None when the question asks for neither) and
        `sentence_score` (its score); all None without candidates."""
        if not ranked:
            return {"answer_terms": None, "answer_type": None, "sentence_score": None}
        best = int(ranked.order[0])
        sentence = ranked.sentences[best]
        kind = answer_type(question)
        return {"answer_terms": key_term_share(question, sentence, self.analyze, self.idf),
                "answer_type": None if kind is None else float(has_answer_type(sentence, kind, question)),
                "sentence_score": float(ranked.scores[best])}

    def choose(self, question: str, ranked: Ranked) -> list[int]:
        """Indices of the sentences to quote, best first: the best one, and a
        further one (within `margin`, up to `max_sentences`) only when it
        holds at least `add_share` of the question's weighted terms that the
        ones chosen before lack."""
        order = ranked.order
        best = float(ranked.scores[order[0]])
        chosen = [int(order[0])]
        if self.max_sentences < 2 or not asks_several(question):
            return chosen
        terms = content_terms(question, self.analyze)
        if not terms:
            return chosen
        weights = self.idf(terms)
        total = sum(weights[t] for t in terms) or 1.0

        def held(i: int) -> set[str]:
            low = normalize_text(ranked.sentences[i]).lower()
            words = set(self.analyze(low))
            return {t for t in terms if holds_term(t, low, words)}

        have = held(chosen[0])
        for i in order[1:]:
            if len(chosen) >= self.max_sentences or ranked.scores[i] < best - self.add_margin:
                break
            new = held(int(i)) - have
            if sum(weights[t] for t in new) / total >= self.add_share:
                chosen.append(int(i))
                have |= new
        return chosen

    def disagree(self, question: str, ranked: Ranked) -> tuple[int, int | None]:
        """(the sentence to quote, a second one that disagrees with it or None), as indices of `ranked`.

        A question that names a qualifier (`qualifiers`: a version, a year, a product) whose best sentence
        names another one of its kind is answered from the best sentence within `conflict_margin` of the
        best score that names the question's (the evidence of "version 2.0" answers "... in version 2.0?",
        not the notes on 1.0). Otherwise a
        sentence within `conflict_margin` of the best, from another chunk, that holds as many of the
        question's key terms (`key_term_share`, at least `conflict_share` and at least the best's less
        0.05) and states other numbers (`stated_values`) than the best does, while each one states some
        number, disagrees with it: both are quoted, each with its citation."""
        order = [int(i) for i in ranked.order]
        best = order[0]
        top = float(ranked.scores[best])
        near = [i for i in order if float(ranked.scores[i]) >= top - self.conflict_margin]
        for q in qualifiers(question):  # the best sentence is about another version / year / model
            if _holds_qualifier(ranked.sentences[best], q) or not _names_another(ranked.sentences[best], q):
                continue
            carrying = [i for i in near if _holds_qualifier(ranked.sentences[i], q)]
            if carrying:
                return carrying[0], None
        mine = stated_values(ranked.sentences[best], question)

        def share(i: int) -> float:
            return key_term_share(question, ranked.sentences[i], self.analyze, self.idf)

        if not mine or share(best) < self.conflict_share:
            return best, None
        for i in near[1:]:
            if ranked.evidence[i].chunk_id == ranked.evidence[best].chunk_id:
                continue
            if share(i) < max(self.conflict_share, share(best) - 0.05):
                continue
            theirs = stated_values(ranked.sentences[i], question)
            if theirs and not (theirs & mine):
                return best, i
        return best, None

    def generate(self, question: str, evidence: list[Evidence]) -> Answer:
        ranked = self.rank(question, evidence)
        if not ranked:
            return Answer(text="", citations=[], refused=True, generator=self.name)
        first, other = self.disagree(question, ranked)
        if other is not None:  # two sources disagree and the question does not say which: both, cited
            parts, support, citations = [], [], []
            for i in (first, other):
                sentence, ev = ranked.sentences[i], ranked.evidence[i]
                parts.append(f"{sentence} [{ev.number}]")
                if ev.chunk_id not in citations:
                    citations.append(ev.chunk_id)
            joiner = "" if language(question) == "zh" else " "
            return Answer(text=joiner.join(parts), citations=citations, refused=False, generator=self.name,
                          support=joiner.join(parts), signals=self.signals(question, ranked), conflict=True)
        if first != int(ranked.order[0]):  # the evidence that carries the question's qualifier
            rest = [int(i) for i in ranked.order if int(i) != first]
            ranked = Ranked(ranked.sentences, ranked.evidence, ranked.scores,
                            np.array([first] + rest, dtype=np.int64), ranked.shares)
        chosen = self.choose(question, ranked)
        joiner = "" if language(question) == "zh" else " "
        parts, citations, support = [], [], []
        for i in chosen:
            sentence, ev = ranked.sentences[i], ranked.evidence[i]
            unit = answer_unit(question, sentence, self.analyze) if self.spans and len(chosen) == 1 else sentence
            parts.append(f"{unit} [{ev.number}]")
            support.append(f"{sentence} [{ev.number}]")
            if ev.chunk_id not in citations:
                citations.append(ev.chunk_id)
        return Answer(text=joiner.join(parts), citations=citations, refused=False, generator=self.name,
                      support=joiner.join(support), signals=self.signals(question, ranked))
