"""What a client sends: the bodies of POST /search, /ask and /feedback
(pydantic models, strict: a number where text belongs, or an unknown
field, is a 400 naming the field). They also describe the OpenAPI schema
and the arguments of the MCP tools.

Every option is "not given" when absent or null: rag.toml (or its default)
applies, as for a flag left out of `rag search` / `rag ask`. The values are
checked by the library (the message names the flag and the config key) and
k against the server's `serve.max_k`. The generator and its LLM settings
are the server's (rag.toml): a request cannot point the server at another
LLM or make it send a key elsewhere.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FilterField = Field(None, description="Filter expressions (AND), e.g. [\"doc_id=guides/*\", \"date>=2025-01-01\"]; "
                                      "see docs/living-index.md")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SearchRequest(_Strict):
    """POST /search: one query; the answer is what `rag search QUERY --json` prints."""

    query: str = Field(description="The query")
    mode: str | None = Field(None, description="dense | sparse | hybrid (search.mode)")
    k: int | None = Field(None, description="Results (search.k; at most serve.max_k)")
    filter: list[str] | str | None = FilterField
    rrf_k: int | None = Field(None, description="RRF constant k (search.rrf_k)")
    candidates: int | None = Field(None, description="Hybrid: hits per retriever before fusion (search.candidates)")
    fusion: str | None = Field(None, description="Hybrid: rrf | minmax | zscore (search.fusion)")
    dense_weight: float | None = Field(None, description="minmax/zscore: weight of the dense scores "
                                                         "(search.dense_weight)")

    def options(self) -> dict:
        """The [search] options given (not None)."""
        return {k: v for k, v in self.model_dump(exclude={"query", "filter"}).items() if v is not None}


class AskRequest(_Strict):
    """POST /ask: one question; the answer is what `rag ask QUESTION --json` prints
    (with `stream`: server-sent events, see docs/serve.md)."""

    question: str = Field(description="The question")
    stream: bool = Field(False, description="Send the answer as server-sent events while it is written")
    mode: str | None = Field(None, description="Retrieval mode of the evidence (search.mode)")
    k: int | None = Field(None, description="Evidence chunks (ask.k; at most serve.max_k)")
    filter: list[str] | str | None = FilterField
    min_score: float | None = Field(None, description="Refuse below this cosine of the best evidence (ask.min_score: "
                                                      "questions with Chinese characters; without min_score_en, "
                                                      "every question)")
    min_score_en: float | None = Field(None, description="Refuse below this cosine of the best evidence, for "
                                                         "questions without Chinese characters (ask.min_score_en)")
    min_coverage: float | None = Field(None, description="ask.min_coverage")
    strong_score: float | None = Field(None, description="ask.strong_score")
    max_sentences: int | None = Field(None, description="ask.max_sentences")
    min_rerank_score: float | None = Field(None, description="ask.min_rerank_score")
    gate: Literal["on", "off"] | None = Field(None, description="ask.gate")
    rewrite: str | None = Field(None, description="none | multi-query | hyde (ask.rewrite; an LLM generator)")
    grade: str | None = Field(None, description="off | llm (ask.grade; an LLM generator)")

    def options(self) -> dict:
        """The [ask] and [search] options given (not None)."""
        return {k: v for k, v in self.model_dump(exclude={"question", "filter", "stream"}).items() if v is not None}


class FeedbackRequest(_Strict):
    """POST /feedback: a thumbs up or down on an answer (or a search), by the id its response carried."""

    answer_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="The X-Rag-Answer-Id header of the response")
    rating: Literal["up", "down"] = Field(description="up | down")
    comment: str | None = Field(None, max_length=2000, description="Optional free text")
