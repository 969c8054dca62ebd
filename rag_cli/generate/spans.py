"""The span answerer: the part of a quoted sentence that holds what the
question asks for, quoted verbatim.

`question_kind(question)` says what a question asks for:

* "date": when, what year, which century, 何时, 哪一年, 什么时候 ...
* "number": how many / much / long / old / far ..., what percentage, 多少, 几 ...
* "person": who, whom, whose, 谁, 哪位
* "place": where, 哪里, 什么地方
* "entity": what / which + a noun, 什么, 哪个 (a thing, a name, a term)
* None: why, how (manner), describe, explain, yes/no questions, 为什么,
  怎么, 如何: the answer is the sentence.

`answer_span(question, sentence, terms)` finds, in `sentence`, the
shortest phrase that holds the asked-for kind, and returns it as a slice of
the sentence (verbatim), or None when none is found (the caller quotes the
whole sentence). `terms(text)` gives the analyzed terms of a text (stemmed
English words, jieba words: `rag_cli.index.sparse.analyze`); a word of the
sentence whose term is one of the question's is a *question word* of the
sentence: answers repeat little of their question, and sit next to the
words they share with it.

English:

* date / number: the date expressions (a month with its day and year, a
  year, a decade, a century) or numbers (digits, number words, with their
  scale: "3.7 million", "50%", "nine") of the sentence that the question
  does not itself hold; a number keeps the unit noun that follows it
  unless the question names that noun ("How many people ..." -> "3.7
  million"). The one nearest the question words wins.
* person / place / entity: candidate phrases are the runs of words between
  punctuation, function words and question words (capitalised runs may hold
  "of", "the", "and", "de": "University of Southern California"); each is
  scored by its nearness to the question words (a phrase right after or
  before them scores most), a bonus for capitals on person and place
  questions, and a penalty per word past four; the best run is returned.
  A sentence without question words gives None.

* cues (`_cue_span`, person / place / entity): "... known as / called
  what?", "what is the term / name for X" -> the words after "known as" /
  "called" in the sentence; "what paper / book / song ..." -> the quoted
  title; "an example of X" -> the words after "for example", "such as",
  "including";
  "what / which NOUN ...", "the name of the NOUN" -> the NOUN of the sentence
  with the modifiers the question lacks ("the so-called speed-up theorem")
  or the name right after it ("manufacturer Thomson").

`answer_unit(question, sentence, terms)` is what the extractive generator
quotes: the phrase when its evidence is strong (a date or number matched
by type, "what type of X", a cue) or when the piece the phrase picker chose
beats the next best by `min_margin`; otherwise the whole sentence (a phrase
picked among close rivals misses the gold answer most of the time, and a
window cut from the sentence lost the answer at its edge or cut a clause). Measured
on SQuAD 2.0's tune articles: docs/answers.md.

Chinese: for date / number questions only, the clause (split at ，；：、
and brackets) that holds the number or date asked for, only when it is
shorter than the sentence; `answer_unit` quotes it only from a sentence
longer than `ZH_CLAUSE_CHARS` (40) characters. Other Chinese questions get the sentence: on
CMRC 2018 the gold answer of a 什么 / 谁 / 哪里 question is often a whole
clause or sentence, and clause spans lowered "answer contains gold" from
77% to 42% of the answered questions (docs/answers.md).

Markdown marks (`**k1**`, `__x__`, `` `code` ``, `[text](url)`) are removed
from answer text by `strip_marks` before any span is taken.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rag_cli.loaders.normalize import has_cjk

Terms = Callable[[str], list[str]]

# ----------------------------------------------------------------------------- marks
_LINK = re.compile(r"!?\[([^\]\n]+)\]\([^)\s]+\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])([*_])(?=[^\s*_])([^*_\n]+?)(?<=[^\s*_])\1(?![\w*])")
_CODE = re.compile(r"`+([^`\n]+?)`+")


def strip_marks(text: str) -> str:
    """`text` without Markdown emphasis, code and link marks: `**k1**` -> `k1`,
    `_x_` -> `x`, `` `ef` `` -> `ef`, `[RRF](url)` -> `RRF`."""
    text = _LINK.sub(r"\1", text)
    text = _CODE.sub(r"\1", text)
    text = _BOLD.sub(r"\2", text)
    return _ITALIC.sub(r"\2", text)


# ----------------------------------------------------------------------------- question kinds
_EN_KINDS = [
    ("date", re.compile(r"\b(when|what (year|years|date|day|month|century|decade|era|time)|which (year|years|date|"
                        r"day|month|century|decade)|how long ago|since when)\b", re.I)),
    ("number", re.compile(r"\b(how (many|much|long|old|far|tall|high|large|big|wide|deep|often|fast|heavy)|"
                          r"what (percentage|percent|number|amount|proportion|share|fraction|size|population)|"
                          r"at what (age|rate|speed|cost|price)|"
                          r"what (is|was|are|were) the (total |overall |approximate |estimated )?(number|amount|"
                          r"percentage|population|cost|price) of)\b", re.I)),
    ("person", re.compile(r"\b(who|whom|whose)\b", re.I)),
    ("place", re.compile(r"\b(where|what (city|country|state|place|region|county|area|town|continent)|"
                         r"which (city|country|state|place|region|county|area|town|continent))\b", re.I)),
    (None, re.compile(r"^\s*what (does|do|did) .*\b(do|mean|control|controls|determine|measure|allow|cause|involve|"
                      r"represent|show|say|set)\b|^\s*what (is|are|was|were) (a |an |the )?[\w-]+( [\w-]+)?\s*\?\s*$",
                      re.I)),
    (None, re.compile(r"^\s*(why|how (do|does|did|is|are|was|were|can|could|should|would)\b)|\b(why|explain|describe)\b"
                      r"|\bhow\b(?! (many|much|long|old|far|tall|high|large|big|wide|deep|often|fast|heavy))", re.I)),
    ("entity", re.compile(r"\b(what|which|name)\b", re.I)),
]
_ZH_KINDS = [
    ("date", re.compile(r"何时|什么时候|哪一年|哪年|哪一天|哪天|哪个月|几月|几号|哪个朝代|什么年代|多少年")),
    ("number", re.compile(r"多少|几|多高|多长|多大|多重|多久|多远|多深|多宽|多厚")),
    (None, re.compile(r"为什么|为何|怎么|怎样|如何|什么原因|哪些")),
    ("person", re.compile(r"谁|哪位|什么人")),
    ("place", re.compile(r"哪里|哪儿|什么地方|何处|何地|在哪")),
    ("entity", re.compile(r"什么|哪个|哪种|何种|哪一")),
]


_EN_QUESTION = re.compile(r"\?\s*$|^\s*(?:what|which|who|whom|whose|when|where|why|how|name|in what|in which|"
                          r"on what|at what|by what|for what|from what|of what|to what|with what|during what)\b", re.I)


def question_kind(question: str) -> str | None:
    """What `question` asks for: "date", "number", "person", "place", "entity" or None (module docstring).
    English text that is no question (no final "?", no leading wh-word: a claim) asks for nothing."""
    if not has_cjk(question) and not _EN_QUESTION.search(question):
        return None
    for kind, pattern in (_ZH_KINDS if has_cjk(question) else _EN_KINDS):
        if pattern.search(question):
            return kind
    return None


# ----------------------------------------------------------------------------- the subject of a question
_AUX = re.compile(r"^\s*(?:what|how|why|when|where|which|who)\s+(?:does|do|did|is|are|was|were|can|could|should|"
                  r"would|will|has|have|had)\s+(.+)$", re.I)


def question_subject(question: str) -> str:
    """The subject of an English "what does X <verb> ...?" question (also how,
    why, ... with is, was, can, ...): the words after the auxiliary verb, up
    to the verb before the next function word or the end ("What does ef
    control?" -> "ef"; "What does the b parameter control in BM25?" -> "b
    parameter"); "" when there is none or the question is Chinese."""
    m = _AUX.match(question)
    if not m or has_cjk(question):
        return ""
    words = re.findall(r"[\w-]+|[^\w\s]", m.group(1))
    while words and words[0].lower() in ("the", "a", "an"):
        words = words[1:]
    out = []
    for k, w in enumerate(words):
        nxt = words[k + 1] if k + 1 < len(words) else ""
        if not re.match(r"\w", w) or w.lower() in _FUNCTION or not nxt or not re.match(r"\w", nxt) \
                or nxt.lower() in _FUNCTION:
            break  # w is the verb (or the subject ends here)
        out.append(w)
        if len(out) == 4:
            break
    return " ".join(out)


# ----------------------------------------------------------------------------- English
_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
          r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_DATE_EN = re.compile(
    rf"\b(?:{_MONTH}\.? \d{{1,2}}(?:st|nd|rd|th)?,? \d{{3,4}}|\d{{1,2}}(?:st|nd|rd|th)? {_MONTH},? \d{{3,4}}|"
    rf"{_MONTH},? \d{{3,4}}|{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?|"
    r"(?:the )?(?:early |late |mid-?)?\d{3,4}s|\d{1,2}(?:st|nd|rd|th) (?:century|centuries)|"
    r"(?:1[0-9]|20)\d\d(?:\s*(?:–|-|to|and)\s*(?:1[0-9]|20)?\d\d)?|"
    r"(?:~\s?|about |around |some |nearly |over )?\d{1,3}(?:,\d{3})*(?:\.\d+)?(?: million| thousand| billion)? "
    r"years ago|\d{1,4} (?:BC|BCE|AD|CE))\b")
_NUMBER_WORDS = ("one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                 "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
                 "hundred thousand dozen half").split()
_SCALE = r"(?:hundred|thousand|million|billion|trillion|percent|per cent|%)"
#: one number: digits with thousands separators ("8,000", "8 000", "8.000"), a decimal, or number words
_NUM = (rf"(?:\d{{1,3}}(?:(?:,|\u202f|\u00a0| (?=\d{{3}}\b))\d{{3}})+(?:\.\d+)?|\d{{1,3}}(?:\.\d{{3}})+(?!\.?\d)|\d+(?:[.,]\d+)?"
        rf"|(?:{'|'.join(_NUMBER_WORDS)})(?:[- ](?:{'|'.join(_NUMBER_WORDS)}))*)")
_NUMBER_EN = re.compile(
    rf"(?:(?:about|around|over|under|nearly|almost|approximately|more than|less than|up to) )?"
    rf"(?<![\w.,])(?:[$£€]\s?)?{_NUM}(?:\s?(?:–|-|to)\s?{_NUM})?(?:\s?{_SCALE})*\b(?:\s?%)?", re.I)
_FUNCTION = frozenset(
    "a an the of in on at to for from by with as and or but nor is are was were be been being has have had do does "
    "did this that these those it its they them their there here which who whom whose what when where why how "
    "than then so such also not no can could may might will would shall should must into onto over under about "
    "after before during between through within without while although though because if since until upon per "
    "each every some any all most more many much other another both either neither same own only just very "
    "he she his her him we our us you your i me my one known called named referred used".split())
_JOINERS = frozenset("of the and de du la le von van der den y & for".split())
_WORD = re.compile(r"[\w$£€%][\w$£€%'’.-]*[\w%]|[\w$£€%]")


def _words(sentence: str) -> list[tuple[int, int, str]]:
    """(start, end, word) of each word of `sentence` (a word keeps inner ' - . but no edge punctuation)."""
    return [(m.start(), m.end(), m.group(0)) for m in _WORD.finditer(sentence)]


def _is_question_word(word: str, q_terms: set[str], q_lower: set[str], terms: Terms) -> bool:
    low = word.lower()
    if low in q_lower:
        return True
    got = terms(low)
    return bool(got) and all(t in q_terms for t in got)


def _nearness(start: int, end: int, q_pos: list[int]) -> float:
    """1 / (1 + word distance from the word span [start, end) to the nearest question word)."""
    if not q_pos:
        return 0.0
    d = min(start - p if p < start else p - end + 1 if p >= end else 0 for p in q_pos)
    return 1.0 / (1.0 + max(d, 0))


def _typed_span(question: str, sentence: str, kind: str, words, q_pos) -> str | None:
    pattern = _DATE_EN if kind == "date" else _NUMBER_EN
    asked = {m.group(0).lower() for m in pattern.finditer(question)}
    best, best_score = None, -1.0
    starts = [w[0] for w in words]
    for m in pattern.finditer(sentence):
        text = m.group(0).strip()
        if not text or text.lower() in asked or not re.search(r"\d|" + "|".join(_NUMBER_WORDS), text, re.I):
            continue
        if kind == "number" and re.fullmatch(r"(?:1[0-9]|20)\d\d", text) and not re.search(r"how (old|long)", question, re.I):
            continue  # a bare year answers when, not how many
        if kind == "number" and any(d.start() <= m.start() < d.end() for d in _DATE_EN.finditer(sentence)):
            continue  # the day of a date ("31 March 2012") is no count
        i = next((k for k, s in enumerate(starts) if s >= m.start()), len(words) - 1)
        j = next((k for k, s in enumerate(starts) if s >= m.end()), len(words))
        score = _nearness(i, max(j, i + 1), q_pos) + (0.01 if kind == "date" and re.search("[A-Za-z]", text) else 0)
        if score > best_score:
            best, best_score = (m.start(), m.end(), i, j), score
    if best is None:
        return None
    start, end, i, j = best
    if kind == "number":  # the unit noun that follows, unless the question names it
        q_low = question.lower()
        k = j
        while k < len(words) and k < j + 2:
            w = words[k][2]
            if w.lower() in _FUNCTION or w.lower() in q_low or sentence[end:words[k][0]].strip():
                break
            end = words[k][1]
            k += 1
    return sentence[start:end]


#: a punctuation mark that ends a clause; a comma, point, colon or dash between two digits is part of a number
#: ("8,000", "3.5", "10:30", "1998–2001") and ends nothing
_PUNCT_EN = r"(?:(?<!\d)[,:–]|[,:–](?!\d)|[;()\[\]\"“”—]|\s-\s)"
_CLAUSE_EN = re.compile(_PUNCT_EN + r"|\s(?=(?:which|that|who|whom|whose|where|whereas|while|when|because|"
                        r"although|though|but|so that)\s)", re.I)
_LINK_EN = re.compile(r"\s(?:is|are|was|were|has been|have been|had been|became|becomes|become|remains|remained|"
                      r"include|includes|included|including|means|refers to|is called|are called|was called|"
                      r"is known as|are known as|was known as|known as|called|named|such as|like)\s", re.I)
_EDGE = _FUNCTION | frozenset("referred regarded considered understood defined seen viewed termed described "
                              "denoted given both either".split())


def _pieces(sentence: str) -> list[tuple[int, int, int]]:
    """(start, end, clause) of the clauses of an English sentence, each also
    split at a linking verb (is, was, include, known as, ...): the candidate
    answer pieces; pieces of one clause share its number."""
    bounds = [0] + [m.start() if not m.group(0).isspace() and m.group(0).strip() else m.start()
                    for m in _CLAUSE_EN.finditer(sentence)] + [len(sentence)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        while a < b and not sentence[a].isalnum():
            a += 1
        if a >= b:
            continue
        cuts = [a] + [x for m in _LINK_EN.finditer(sentence, a, b) for x in (m.start(), m.end())] + [b]
        for x, y in zip(cuts[::2], cuts[1::2]):
            if y > x:
                out.append((x, y, a))
    return out


def _proper_run(words, idx: list[int], q_mask, q_pos) -> tuple[int, int] | None:
    """The run of capitalised words (joined by of, the, and, de ...) among
    `idx` that holds a word the question lacks, nearest the question words; None if none."""
    runs, cur = [], []
    for k in idx:
        w = words[k][2]
        if w[:1].isupper() or (cur and w.lower() in _JOINERS):
            cur.append(k)
        else:
            if cur:
                runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    best, best_score = None, -1.0
    for run in runs:
        while run and words[run[-1]][2].lower() in _JOINERS:
            run = run[:-1]
        if not run or all(q_mask[k] for k in run) or run[0] == 0 and len(run) == 1 and not q_pos:
            continue
        score = _nearness(run[0], run[-1] + 1, q_pos) + 0.1 * len(run)
        if score > best_score:
            best, best_score = (run[0], run[-1]), score
    return best


def _trim(words) -> tuple[int, int]:
    """[i, j) of `words` without function words at either edge."""
    i, j = 0, len(words)
    while i < j and words[i][2].lower() in _EDGE:
        i += 1
    while j > i and words[j - 1][2].lower() in _EDGE:
        j -= 1
    return i, j


#: "what company / channel / team ...": a thing with a name, a capitalised run
_NAMED = re.compile(r"\b(?:what|which)\s+(?:\w+\s+)?(?:company|companies|corporation|firm|organi[sz]ation|channel|"
                    r"network|team|club|university|college|school|band|group|party|newspaper|magazine|station|"
                    r"brand|product|service|airport|river|mountain|park|museum|church|ship|album|film|show|"
                    r"award|prize|language|religion|state|province|nation|name|title)\b", re.I)


def _entity_span(question: str, sentence: str, kind: str, words, q_pos, q_mask, scores: list | None = None) \
        -> str | None:
    """The piece of `sentence` (`_pieces`) that holds words the question lacks, next to the words it shares,
    on the other side of a linking verb from them, and short (for who / where, its capitalised run); None when
    the sentence has no question words. `scores`, when given, gets the best piece's score and the next best."""
    if not q_pos:
        return None
    starts = [w[0] for w in words]
    best, best_score, second = None, -1e9, -1e9
    pieces = _pieces(sentence)
    asked_in = {}  # clause -> pieces holding question words
    for a, b, c in pieces:
        asked_in[c] = asked_in.get(c, 0) + any(q_mask[k] for k, st in enumerate(starts) if a <= st < b)
    for a, b, c in pieces:
        idx = [k for k, st in enumerate(starts) if a <= st < b]
        if not idx:
            continue
        i0, j0 = _trim([words[k] for k in idx])
        idx = idx[i0:j0]
        if not idx:
            continue
        content = [k for k in idx if words[k][2].lower() not in _EDGE]
        fresh = [k for k in content if not q_mask[k]]
        if not fresh:
            continue  # nothing the question does not already say
        length = len(idx)
        score = (_nearness(idx[0], idx[-1] + 1, q_pos) + min(len(fresh), 3) / 3 - 0.5 * (len(content) - len(fresh))
                 / len(content) - 0.06 * max(0, length - 5))
        if kind in ("person", "place"):
            score += 0.5 * sum(words[k][2][:1].isupper() for k in fresh) / len(fresh)
        held = any(q_mask[k] for k in idx)
        if asked_in[c] - held > 0:  # "X is Y" with the question's words on the other side of the verb
            score += 0.5
        if score > best_score:
            best, best_score, second = (idx[0], idx[-1]), score, best_score
        elif score > second:
            second = score
    if best is None:
        return None
    if scores is not None:
        scores.extend([best_score, second])
    i, j = best
    if kind in ("person", "place") or (kind == "entity" and j - i >= 4 and _NAMED.search(question)):
        run = _proper_run(words, list(range(i, j + 1)), q_mask, q_pos)
        if run is not None:
            i, j = run
    return sentence[words[i][0]:words[j][1]]


_TYPE_OF = re.compile(r"\b(?:what|which)\s+(?:\w+\s+)?(?:type|types|kind|kinds|sort|sorts|form|forms|class|classes)"
                      r"\s+of\s+([\w-]+(?:\s+[\w-]+)?)", re.I)


def _type_of_span(question: str, sentence: str, words, q_mask, terms: Terms) -> str | None:
    """For "what type/kind of X": the words right before an X of the sentence
    that the question lacks (its modifiers), with X: "quantum Turing machines"."""
    m = _TYPE_OF.search(question)
    if not m:
        return None
    head = [t for t in terms(m.group(1).lower()) if t]
    if not head:
        return None
    first = head[0]
    for k, w in enumerate(words):
        if first not in terms(w[2].lower()):
            continue
        i = k
        while i > 0 and k - i < 3 and not q_mask[i - 1] and words[i - 1][2].lower() not in _EDGE \
                and not re.search(r"[,;:()]", sentence[words[i - 1][1]:words[i][0]]):
            i -= 1
        if i == k:
            continue
        j = k
        while j + 1 < len(words) and j - k < len(head) - 1 and any(t in head for t in terms(words[j + 1][2].lower())):
            j += 1
        return sentence[words[i][0]:words[j][1]]
    return None


_AS_Q = re.compile(r"\b(known as|called|named|referred to as|termed|described as|defined as|considered)\b", re.I)
_EXAMPLE_Q = re.compile(r"\bexamples?\b", re.I)
_EXAMPLE_S = re.compile(r"\b(?:for example|for instance|such as|e\.g\.,?|including)\s+", re.I)
_HEAD_Q = re.compile(r"\b(?:what|which)\s+(?:is|was|are|were)\s+the\s+name\s+of\s+(?:the\s+|a\s+|an\s+)?([\w-]+(?:\s+[\w-]+){0,3})"
                     r"|\b(?:what|which)\s+((?:[\w-]+\s+){0,2}[\w-]+)", re.I)
_TERM_Q = re.compile(r"\b(?:term|name|word|phrase)\b", re.I)
_AS_S = re.compile(r"\b(?:is|are|was|were) (?:called|known as|termed|named|referred to as)\s+", re.I)
_TITLE_Q = re.compile(r"\b(?:what|which)\s+(?:[\w-]+\s+)?(?:paper|book|song|album|film|movie|title|article|novel|poem|"
                      r"show|series|play|report|essay|slogan|motto)\b", re.I)
_QUOTED = re.compile(r"[\"“]([^\"“”]{3,120})[\"”]")
#: nouns after what / which that name no kind of thing ("what is", "which one", "what other ...")
_NO_HEAD = _FUNCTION | frozenset("type types kind kinds sort form forms class name names example examples part parts "
                                 "way ways thing things something other else".split())


def _after(sentence: str, words, at: int, q_mask, max_words: int = 6) -> tuple[int, int] | None:
    """[i, j] word indices of the words from character `at` of `sentence` up to the clause's end (punctuation),
    at most `max_words`, without function words at the edges; None when none is left or all are the question's."""
    idx = [k for k, w in enumerate(words) if w[0] >= at]
    out = []
    for k in idx:
        if out and re.search(_PUNCT_EN, sentence[words[out[-1]][1]:words[k][0]]):
            break
        out.append(k)
        if len(out) == max_words:
            break
    while out and words[out[-1]][2].lower() in _EDGE:
        out.pop()
    while out and words[out[0]][2].lower() in _EDGE:
        out.pop(0)
    if not out or all(q_mask[k] for k in out):
        return None
    return out[0], out[-1]


def _head_noun(question: str, terms: Terms) -> list[str]:
    """The terms of the noun that a "what / which NOUN ..." question asks for ("What theorem was ..." ->
    [theorem]; "What is the name of the set top box manufacturer" -> [manufactur]); [] when none."""
    m = _HEAD_Q.search(question)
    if not m:
        return []
    group = (m.group(1) or m.group(2)).split()
    head = []
    for w in group:  # up to the first function word: "What branch of ..." -> branch
        if w.lower() in _FUNCTION and head:
            break
        if w.lower() not in _FUNCTION:
            head.append(w)
    if not head or head[-1].lower() in _NO_HEAD or head[0].lower() in _NO_HEAD:
        return []
    return [t for t in terms(head[-1].lower()) if t]


def _cue_span(question: str, sentence: str, words, q_mask, terms: Terms) -> tuple[str, str] | None:
    """A phrase that the question's own wording points at, and the cue: "as" (X is known as / called what
    -> the words after known as, called, ... in the sentence), "example" (what is an example of X -> the
    words after such as, for example, including ...), "head" (what NOUN ... -> the NOUN of the sentence with
    its modifiers the question lacks, or the name next to it: "speed-up theorem", "manufacturer Thomson")."""
    q_words = {w[2].lower() for w in _words(question)}
    literal = [w[2].lower() in q_words for w in words]  # "randomized" is new even when "random" is asked about
    m = _AS_Q.search(question)
    if m:
        cue = re.search(r"\b" + re.escape(m.group(1)).replace("\\ ", "\\s+") + r"\s+", sentence, re.I)
        if cue:
            got = _after(sentence, words, cue.end(), literal)
            if got:
                return sentence[words[got[0]][0]:words[got[1]][1]], "as"
    if _TERM_Q.search(question):  # "what is the term / name for X" -> "X is called / known as Y"
        cue = _AS_S.search(sentence)
        if cue:
            got = _after(sentence, words, cue.end(), literal)
            if got:
                return sentence[words[got[0]][0]:words[got[1]][1]], "as"
    if _TITLE_Q.search(question):  # "what paper / book / song ..." -> the quoted title
        for m in _QUOTED.finditer(sentence):
            inner = [k for k, w in enumerate(words) if m.start(1) <= w[0] < m.end(1)]
            if inner and not all(q_mask[k] for k in inner):
                return m.group(1), "title"
    if _EXAMPLE_Q.search(question):
        for cue in _EXAMPLE_S.finditer(sentence):
            got = _after(sentence, words, cue.end(), q_mask)
            if got:
                return sentence[words[got[0]][0]:words[got[1]][1]], "example"
    head = _head_noun(question, terms)
    if not head:
        return None
    for k, w in enumerate(words):
        if head[0] not in terms(w[2].lower()):
            continue
        i = k  # modifiers before the noun that the question lacks
        while i > 0 and k - i < 3 and not q_mask[i - 1] and words[i - 1][2].lower() not in _EDGE \
                and not re.search(r"[,;:()]", sentence[words[i - 1][1]:words[i][0]]):
            i -= 1
        if i < k:
            return sentence[words[i][0]:w[1]], "head"
        j = k  # a name right after the noun: "manufacturer Thomson"
        while j + 1 < len(words) and j - k < 4 and words[j + 1][2][:1].isupper() and not q_mask[j + 1] \
                and not re.search(r"[,;:()]", sentence[words[j][1]:words[j + 1][0]]):
            j += 1
        if j > k:
            return sentence[words[k + 1][0]:words[j][1]], "head"
    return None


def _english_span(question: str, sentence: str, kind: str, terms: Terms) -> str | None:
    words = _words(sentence)
    if not words:
        return None
    q_words = _words(question)
    q_lower = {w[2].lower() for w in q_words} - _FUNCTION
    q_terms = set(terms(question.lower()))
    q_mask = [_is_question_word(w[2], q_terms, q_lower, terms) and w[2].lower() not in _FUNCTION for w in words]
    q_pos = [i for i, hit in enumerate(q_mask) if hit]
    if kind in ("date", "number"):
        return _typed_span(question, sentence, kind, words, q_pos)
    if kind == "entity":
        span = _type_of_span(question, sentence, words, q_mask, terms)
        if span:
            return span
    return _entity_span(question, sentence, kind, words, q_pos, q_mask)


# ----------------------------------------------------------------------------- Chinese
_ZH_CLAUSE = re.compile(r"(?:[^，,；;：:、（）()“”「」]|(?<=\d)[,:](?=\d))+")
_ZH_DATE = re.compile(r"\d+\s*[年月日]|世纪|年代|(?<!\d)(?:1[0-9]|20)\d\d(?!\d)|[一二三四五六七八九十〇零]+[年月日]")
_ZH_NUMBER = re.compile(r"\d|[一二三四五六七八九十百千万亿两]+[个名座条种岁米年次位人所家倍层公里吨元]")


def _chinese_span(question: str, sentence: str, kind: str, terms: Terms) -> str | None:
    clauses = [(m.start(), m.end()) for m in _ZH_CLAUSE.finditer(sentence) if m.group(0).strip()]
    if len(clauses) < 2:
        return None
    from rag_cli.generate.gate import QUESTION_WORDS

    q_terms = [t for t in set(terms(question)) - QUESTION_WORDS if (len(t) > 1 if has_cjk(t) else t.isalnum())]
    asked = set(re.findall(r"\d+", question))

    def held(text: str) -> float:
        return sum(len(t) for t in q_terms if t in text)

    best, best_score = None, 0.0
    for k, (s, e) in enumerate(clauses):
        text = sentence[s:e]
        rest = re.sub(r"\d+", lambda m: "" if m.group(0) in asked else m.group(0), text)
        if kind == "date":
            ok = bool(_ZH_DATE.search(rest))
        elif kind == "number":
            ok = bool(_ZH_NUMBER.search(_ZH_DATE.sub("", rest)))
        else:
            ok = len(text) - held(text) >= 2  # something besides the question's own words
        if not ok:
            continue
        score = held(text) + 0.5 * max((held(sentence[a:b]) for a, b in clauses[max(0, k - 1):k + 2]), default=0)
        if kind in ("date", "number"):
            score += 1.0
        elif kind == "place" and re.search(r"位于|坐落|地处|在", text):
            score += 1.0
        if score > best_score:
            best, best_score = (s, e), score
    if best is None:
        return None
    s, e = best
    return sentence[s:e].strip().rstrip("。！？.!?")


def answer_span(question: str, sentence: str, terms: Terms) -> str | None:
    """The verbatim part of `sentence` that holds what `question` asks for
    (module docstring), or None: quote the whole sentence."""
    kind = question_kind(question)
    if kind is None or (has_cjk(question) and kind not in ("date", "number")):
        return None  # Chinese: only dates and numbers (CMRC's other answers are often whole sentences)
    span = (_chinese_span if has_cjk(question) else _english_span)(question, sentence, kind, terms)
    if not span or len(span) >= len(sentence.rstrip("。.!?！？")):
        return None
    return span


# ----------------------------------------------------------------------------- the unit of an answer
_CLAUSE_CUT = re.compile(_PUNCT_EN + r"|\s(?=(?:which|that|who|whom|whose|where|whereas|while|because|"
                         r"although|though|but|so that|and then)\s)", re.I)


def _clauses(sentence: str) -> list[tuple[int, int]]:
    """(start, end) of the clauses of an English sentence: cut at punctuation and before relative words."""
    bounds = [0] + [m.start() for m in _CLAUSE_CUT.finditer(sentence)] + [len(sentence)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        while a < b and not sentence[a].isalnum():
            a += 1
        while b > a and not sentence[b - 1].isalnum() and sentence[b - 1] not in "%)’'":
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def _window(words, q_pos, around: tuple[int, int] | None, max_words: int) -> tuple[int, int]:
    """[i, j) of at most `max_words` words: around the words [around) when given, else where the question
    words are densest (ties: the earliest)."""
    n = len(words)
    if n <= max_words:
        return 0, n
    if around is not None:
        i, j = around
        pad = max(0, max_words - (j - i))
        i = max(0, min(i - pad // 2, n - max_words))
        return i, i + max_words
    hits = set(q_pos)
    best, best_i = -1, 0
    for i in range(0, n - max_words + 1):
        c = sum(1 for k in range(i, i + max_words) if k in hits)
        if c > best:
            best, best_i = c, i
    return best_i, best_i + max_words


#: Chinese: the clause of a date or number is quoted only from a sentence longer than this (characters); a
#: shorter one is quoted whole (chosen on CMRC 2018's tune half: docs/answers.md)
ZH_CLAUSE_CHARS = 40

#: the phrase is quoted alone when its evidence is strong: a date or number matched by type, "what type of X",
#: "known as what", "an example of", "what NOUN" (`_cue_span`)
STRONG = ("date", "number", "type", "as", "example", "head", "title")


def answer_unit(question: str, sentence: str, terms: Terms, *, mode: str = "auto", max_words: int = 20,
                min_margin: float = 0.4, weak: str = "sentence") -> str:
    """The text to quote from `sentence` for `question`, verbatim: the smallest unit the answerer is sure of.

    English questions that ask for a date, a number, a person, a place or a thing (`question_kind`):

    * mode "phrase": the span answerer's phrase (`answer_span`, with the cues of `_cue_span`), else the
      sentence;
    * "window": the sentence cut to `max_words` words around that phrase (or, without one, where the
      question's words are densest); a sentence of at most `max_words` words whole;
    * "clause": the clause (the sentence cut at punctuation and relative words) that holds the phrase,
      joined with a neighbour holding the question's words when it has none, cut to `max_words`;
    * "auto" (the default): the phrase when the answerer is confident of it, else the `weak` unit ("sentence":
      the whole sentence, the default; "window" or "clause" as above). The confidence is the kind of
      evidence: a date or number matched by the question's answer type and the cues of `_cue_span` are
      confident (`STRONG`); a phrase of the piece picker is confident when its score beats the next best
      piece's by at least `min_margin` (the score of `_entity_span`: nearness to the question's words,
      words the question lacks, the other side of a linking verb, capitals for who / where).

    Chosen on SQuAD 2.0's tune articles (docs/answers.md, `bench/answer_units.py`). Questions that ask for
    no kind of fact (why, how, what does X do, claims) get the whole sentence; Chinese questions the
    clause of a date or number (`answer_span`) of a sentence longer than `ZH_CLAUSE_CHARS` characters, else
    the sentence (on CMRC 2018 a short sentence is often the whole gold answer, and its date clause lost it).
    """
    kind = question_kind(question)
    if has_cjk(question):  # a short sentence is often the whole gold answer (CMRC): the clause only in a long one
        return (answer_span(question, sentence, terms) if len(sentence) > ZH_CLAUSE_CHARS else None) or sentence
    if kind is None:
        return sentence
    words = _words(sentence)
    if not words:
        return sentence
    q_lower = {w[2].lower() for w in _words(question)} - _FUNCTION
    q_terms = set(terms(question.lower()))
    q_mask = [_is_question_word(w[2], q_terms, q_lower, terms) and w[2].lower() not in _FUNCTION for w in words]
    q_pos = [i for i, hit in enumerate(q_mask) if hit]
    phrase, why, margin = None, None, None
    if kind in ("date", "number"):
        phrase, why = _typed_span(question, sentence, kind, words, q_pos), kind
    elif kind == "entity":
        phrase, why = _type_of_span(question, sentence, words, q_mask, terms), "type"
    if not phrase and kind not in ("date", "number"):
        phrase, why = _cue_span(question, sentence, words, q_mask, terms) or (None, None)
    if not phrase:
        got: list = []
        phrase, why = _entity_span(question, sentence, kind, words, q_pos, q_mask, got), kind
        margin = got[0] - got[1] if len(got) == 2 else None
    if phrase and len(phrase) >= len(sentence.rstrip(".!?")):
        phrase = None
    if phrase and (mode == "phrase" or (mode == "auto" and (why in STRONG or margin is None or margin >= min_margin))):
        return phrase
    if mode == "phrase":
        return sentence
    if mode == "auto":
        mode = weak
    if mode == "sentence":  # not confident: the whole sentence, never a fragment cut mid-clause
        return sentence
    starts = [w[0] for w in words]
    around = None
    if phrase:
        at = sentence.find(phrase)
        i = next((k for k, s in enumerate(starts) if s >= at), len(words) - 1)
        j = next((k for k, s in enumerate(starts) if s >= at + len(phrase)), len(words))
        around = (i, max(j, i + 1))
    if mode == "window":
        i, j = _window(words, q_pos, around, max_words)
        return sentence[words[i][0]:words[j - 1][1]] if j - i < len(words) else sentence
    clauses = [c for c in ([k for k, s in enumerate(starts) if a <= s < b] for a, b in _clauses(sentence)) if c]
    if around is not None:
        at = next((n for n, c in enumerate(clauses) if around[0] in c), 0)
    else:  # the clause with question words and words the question lacks, the most question words
        at = max(range(len(clauses)), key=lambda n: (any(q_mask[k] for k in clauses[n]),
                                                      any(not q_mask[k] and words[k][2].lower() not in _EDGE
                                                          for k in clauses[n]),
                                                      sum(q_mask[k] for k in clauses[n])))
    lo = hi = at

    def size(a: int, b: int) -> int:
        return sum(len(clauses[n]) for n in range(a, b + 1))

    if not any(q_mask[k] for k in clauses[at]):  # the answer sits next to the question's words: join them
        if at > 0 and any(q_mask[k] for k in clauses[at - 1]) and size(at - 1, at) <= max_words:
            lo = at - 1
        elif at + 1 < len(clauses) and any(q_mask[k] for k in clauses[at + 1]) and size(at, at + 1) <= max_words:
            hi = at + 1
    i, j = clauses[lo][0], clauses[hi][-1] + 1
    if j - i > max_words:
        a, b = _window(words[i:j], [p - i for p in q_pos if i <= p < j],
                       None if around is None else (around[0] - i, around[1] - i), max_words)
        i, j = i + a, i + b
    return sentence[words[i][0]:words[j - 1][1]]
