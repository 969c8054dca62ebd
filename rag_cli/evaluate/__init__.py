"""Evaluation: query and qrels readers, metrics (trec_eval definitions), reports."""

from rag_cli.evaluate.datasets import read_qrels, read_queries
from rag_cli.evaluate.metrics import METRICS, hit_at_k, mrr_at_k, ndcg_at_k, precision_at_k, recall_at_k
from rag_cli.evaluate.report import doc_level_run, evaluate_rows, evaluate_run, run_for_qrels

__all__ = [
    "METRICS",
    "doc_level_run",
    "evaluate_rows",
    "evaluate_run",
    "hit_at_k",
    "mrr_at_k",
    "ndcg_at_k",
    "precision_at_k",
    "read_qrels",
    "read_queries",
    "recall_at_k",
    "run_for_qrels",
]
