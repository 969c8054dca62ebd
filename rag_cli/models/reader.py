"""The reader: an extractive question-answering model (any ONNX export of
one, e.g. `optimum-cli export onnx --task question-answering --model
deepset/roberta-base-squad2 DIR`) that finds the answer span in a passage.

Graph: inputs `input_ids`, `attention_mask` (and `token_type_ids` when the
graph has it), int64 (batch, sequence); outputs `start_logits` and
`end_logits`, float (batch, sequence). Folder: the graph (`model.onnx` or
`onnx/model.onnx`), `tokenizer.json`, and config.json / tokenizer_config.json
for max_length (`rag_cli.models.folder.ModelFolder`).

For a question and a passage (`Reader.read`):

* the pair is encoded as the tokenizer's template builds it ([CLS] question
  [SEP] passage [SEP] for BERT, <s> q </s></s> p </s> for RoBERTa); a passage
  longer than the room left by the question is read in windows of that
  room, each overlapping the previous one by `stride` tokens (each window
  is the passage text between its first and last token, encoded again with
  the question, so every window has the model's own special tokens);
* a span is tokens i..j of the passage (j - i < `max_answer_tokens`), scored
  start_logits[i] + end_logits[j]; the no-answer score is start_logits[0] +
  end_logits[0] (the first token, [CLS] / <s>, as SQuAD 2.0 models are
  trained), the least over the windows;
* the answer is the best span over the windows, as the passage's verbatim
  text between the span's character offsets (so it works for any script:
  Chinese characters map back through the tokenizer's offsets).

`ReaderSpan.no_answer` is true when the no-answer score beats the best span
(Haystack's and the SQuAD 2.0 convention, with a threshold of 0).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from rag_cli.errors import BadInput


@dataclass(frozen=True)
class ReaderSpan:
    """The reader's best span in one passage (`index` into the passages read):
    its `text` (passage[start:end], verbatim), `score` (start + end logit),
    and the passage's `null_score` (the no-answer score). `text` is "" and
    `score` -inf when the passage had no token to point at."""

    index: int
    text: str
    start: int
    end: int
    score: float
    null_score: float

    @property
    def no_answer(self) -> bool:
        """Whether no-answer wins: null_score > score."""
        return self.null_score > self.score


class Reader:
    """An extractive QA model over its ONNX graph and tokenizer.

    Args:
        folder: the model folder (see the module docstring).
        threads: CPU threads (0 = all); provider: cpu, cuda or coreml.
        max_answer_tokens: the longest span, in tokens.
        stride: tokens shared by consecutive windows of a long passage.
        max_length: tokens per window, special tokens included (None: the folder's max_length).

    Raises:
        BadInput: a missing folder or file, or a graph without start_logits /
            end_logits outputs or with an input other than input_ids,
            attention_mask, token_type_ids.
    """

    def __init__(self, folder: str | os.PathLike, threads: int = 0, provider: str = "cpu",
                 max_answer_tokens: int = 30, stride: int = 64, max_length: int | None = None):
        from tokenizers import Tokenizer

        from rag_cli.models.folder import ModelFolder
        from rag_cli.models.onnx_runtime import KNOWN_INPUTS, create_session, execution_providers

        self.folder = ModelFolder.load(Path(folder).expanduser())
        self.path = self.folder.path
        self.max_length = int(max_length or self.folder.max_length)
        self.max_answer_tokens, self.stride = max_answer_tokens, stride
        self.tokenizer = Tokenizer.from_file(str(self.folder.tokenizer_path))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.session = create_session(self.folder.onnx_path, threads or None, execution_providers(provider))
        self.inputs = [i.name for i in self.session.get_inputs()]
        outputs = {o.name for o in self.session.get_outputs()}
        bad = [n for n in self.inputs if n not in KNOWN_INPUTS]
        if bad or not {"start_logits", "end_logits"} <= outputs:
            raise BadInput(f"{self.folder.onnx_path}: not an extractive question-answering graph (inputs "
                           f"{', '.join(self.inputs)}; outputs {', '.join(sorted(outputs))}); a reader needs inputs "
                           "input_ids, attention_mask (token_type_ids optional) and outputs start_logits, "
                           "end_logits: export it with `optimum-cli export onnx --task question-answering`")
        self.n_special = self.tokenizer.num_special_tokens_to_add(True)

    # ------------------------------------------------------------------ windows
    def _windows(self, question: str, passage: str) -> list[tuple[object, int]]:
        """(encoding of the question with a window of the passage, the
        window's character offset in the passage) for each window."""
        q = self.tokenizer.encode(question, add_special_tokens=False)
        p = self.tokenizer.encode(passage, add_special_tokens=False)
        q_room = max(1, min(len(q.ids), self.max_length // 2))
        question = question[:q.offsets[q_room - 1][1]] if len(q.ids) > q_room else question
        room = max(1, self.max_length - q_room - self.n_special)
        step = max(1, room - min(self.stride, room // 2))
        offsets = p.offsets
        out = []
        start = 0
        while True:
            end = min(len(offsets), start + room)
            if end <= start:
                break
            a, b = offsets[start][0], offsets[end - 1][1]
            enc = self.tokenizer.encode(question, passage[a:b])
            out.append((enc, a))
            if end >= len(offsets):
                break
            start += step
        return out

    def read(self, question: str, passages: Sequence[str]) -> list[ReaderSpan]:
        """The best span of each passage for `question` (module docstring)."""
        items = []  # (passage index, encoding, char offset)
        for n, passage in enumerate(passages):
            for enc, offset in self._windows(question, passage):
                items.append((n, enc, offset))
        best: list[list] = [[n, "", 0, 0, -np.inf, np.inf] for n in range(len(passages))]
        if not items:
            return [ReaderSpan(*b) for b in best]
        width = min(self.max_length, max(len(e.ids) for _, e, _ in items))
        batch = {"input_ids": np.zeros((len(items), width), dtype=np.int64),
                 "attention_mask": np.zeros((len(items), width), dtype=np.int64),
                 "token_type_ids": np.zeros((len(items), width), dtype=np.int64)}
        for r, (_, enc, _) in enumerate(items):
            k = min(width, len(enc.ids))
            batch["input_ids"][r, :k] = enc.ids[:k]
            batch["attention_mask"][r, :k] = 1
            batch["token_type_ids"][r, :k] = enc.type_ids[:k]
        feed = {name: batch[name] for name in self.inputs}
        start_logits, end_logits = self.session.run(["start_logits", "end_logits"], feed)
        for r, (n, enc, offset) in enumerate(items):
            s, e = np.asarray(start_logits[r], dtype=np.float64), np.asarray(end_logits[r], dtype=np.float64)
            seq = enc.sequence_ids
            ctx = [i for i in range(min(width, len(seq))) if seq[i] == 1]
            entry = best[n]
            entry[5] = min(entry[5], float(s[0] + e[0]))
            if not ctx:
                continue
            cs, ce = s[ctx], e[ctx]
            # best i <= j < i + max_answer_tokens over the context tokens
            scores = cs[:, None] + ce[None, :]
            i_idx, j_idx = np.indices(scores.shape)
            scores[(j_idx < i_idx) | (j_idx - i_idx >= self.max_answer_tokens)] = -np.inf
            flat = int(np.argmax(scores))
            i, j = divmod(flat, scores.shape[1])
            if scores[i, j] > entry[4]:
                a, b = enc.offsets[ctx[i]][0] + offset, enc.offsets[ctx[j]][1] + offset
                entry[1:5] = [passages[n][a:b], a, b, float(scores[i, j])]
        return [ReaderSpan(*b) for b in best]


def load_reader(folder: str, threads: int = 0, provider: str = "cpu") -> Reader:
    """The `Reader` of `model.reader` (a folder). Raises BadInput for a missing or unusable one."""
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise BadInput(f"--reader {folder}: no such folder (config model.reader); give the folder of an ONNX "
                       "question-answering export (`optimum-cli export onnx --task question-answering`)")
    return Reader(path, threads=threads, provider=provider)
