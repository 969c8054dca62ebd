# rag-cli: `make demo` (install + index sample_corpus/ + search + ask), `make test`, `make test-fast`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   := .rag-demo
RAG    := $(BIN)/rag

.PHONY: demo test test-fast install dev bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e .
	touch $@

# the llm extra builds llama-cpp-python from source once (minutes); pip caches the wheel.
# GGML_NATIVE=OFF: the -march=native build crashed (SIGSEGV) on the first decode on a
# virtual machine whose CPU reports AMX/AVX-512. Only libllama and libggml are built:
# no multimodal library (LLAVA_BUILD), no llama.cpp server, tools, tests or examples.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_SERVER=OFF \
	-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
$(VENV)/.dev: $(VENV)/.installed
	CMAKE_ARGS="$${CMAKE_ARGS:-$(LLAMA_CMAKE_ARGS)}" $(BIN)/python -m pip install -q -e '.[dev,llm,ray,milvus]'
	touch $@

install: $(VENV)/.installed

dev: $(VENV)/.dev

demo: install
	$(RAG) chunk sample_corpus/docs -p $(DEMO)
	$(RAG) embed -p $(DEMO)
	$(RAG) index -p $(DEMO)
	$(RAG) search "How does reciprocal rank fusion combine rankings?" -k 3 -p $(DEMO)
	$(RAG) ask "What does the b parameter control in BM25, and what is its usual default?" -p $(DEMO)
	$(RAG) ask "为什么中文文本在 BM25 检索之前需要分词？" -p $(DEMO)
	$(RAG) ask "What is the boiling point of mercury?" -p $(DEMO)

test: dev
	$(BIN)/python -m pytest -q

# the edit loop: unit tests only (no default-model conversion, no end-to-end runs, nothing that needs the
# llm extra), under a minute on an idle 2-core machine; it installs only the dev extra
$(VENV)/.test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

test-fast: $(VENV)/.test
	$(BIN)/python -m pytest -q -m "not e2e and not slow and not llm"

bench: install
	$(BIN)/python bench/pipeline.py scifact

clean:
	rm -rf $(DEMO) .pytest_cache
