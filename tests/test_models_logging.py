"""A model conversion leaves the process's logging as it found it.

onnxruntime's ``quantize_dynamic`` calls the module function
``logging.warning``, which installs a stderr handler on a root logger that
has none (``logging.basicConfig``); afterwards every DEBUG line of a library
that sets its own logger to DEBUG (bm25s) reached stderr. The CLI process
has no root handler, so the tests below start from none (pytest's own
capture handlers are set aside) and go through the code path of the default
model's conversion and of ``rag models quantize``.
"""

from __future__ import annotations

import contextlib
import logging

from rag_cli.models.convert.quantize import quantize_int8, quantize_query_graph, quiet_logging
from tiny_models import make_bi_encoder


@contextlib.contextmanager
def bare_root():
    """The root logger as in the CLI: no handlers, level WARNING. Set up in the
    test body: pytest adds its capture handlers after the fixtures."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    for h in saved:
        root.removeHandler(h)
    root.setLevel(logging.WARNING)
    try:
        yield root
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
        root.setLevel(level)


def test_quantizing_leaves_no_root_handler(tmp_path, capfd):
    folder = make_bi_encoder(tmp_path / "bi")
    bm25s = logging.getLogger("bm25s")
    bm25s_level = bm25s.level
    with bare_root() as root:
        quantize_int8(folder / "model.onnx", tmp_path / "int8.onnx", folder / "tokenizer.json")
        quantize_query_graph(folder / "model.onnx", tmp_path / "query.onnx")
        assert root.handlers == [] and root.level == logging.WARNING
        capfd.readouterr()
        bm25s.setLevel(logging.DEBUG)  # as bm25s does on import
        try:
            bm25s.debug("Building index from IDs")
        finally:
            bm25s.setLevel(bm25s_level)
        assert capfd.readouterr().err == ""


def test_quiet_logging_restores_handlers_and_levels():
    mine = logging.NullHandler()
    named = logging.getLogger("rag-cli-test-quiet")
    named.setLevel(logging.INFO)
    with bare_root() as root:
        root.addHandler(mine)
        with quiet_logging("rag-cli-test-quiet"):
            assert root.level == named.level == logging.ERROR
            logging.basicConfig(force=True)  # what onnxruntime's optimizer CLI does: drops ours, adds its own
            assert root.handlers and mine not in root.handlers
        assert root.handlers == [mine]
        assert (root.level, named.level) == (logging.WARNING, logging.INFO)
    named.setLevel(logging.NOTSET)
