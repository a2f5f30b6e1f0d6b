# The two commands a user needs: `make eval` and `make test`. Everything installs on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# A plain `torch` requirement pulls a multi-GB CUDA build; pin the wheel explicitly.
TORCH_SPEC ?= torch==2.13.0
# The tests need every extra; `make eval` only what its models use (BM25, and ONNX for the exact runtime).
EXTRAS ?= dev,bm25,qa,onnx,ray,train,multivector,sparse
EVAL_EXTRAS ?= bm25,onnx
EVAL_STAMP := $(VENV)/.installed-eval

DATASET ?= scifact
MODEL   ?= sentence-transformers/all-MiniLM-L6-v2
SUITE   ?= offline-smoke
RESULTS ?= results
ARGS    ?=

# Offline machines: a local folder (or URL prefix) holding BEIR datasets. Defaults to the shared
# data checkout beside this repository when there is one; empty means the official download server.
HARNESS_BEIR_MIRROR ?= $(abspath $(wildcard ../shared/data/beir))
export HARNESS_BEIR_MIRROR

.PHONY: setup setup-eval install system-deps eval test test-fast lint table compare reproduce report bench clean

# Everything the tests need, Debian packages included (`make test`).
setup: $(STAMP) system-deps

# What evaluating, tables and reports need: Python packages only, no apt, no browser.
setup-eval: $(EVAL_STAMP)

# Debian packages the tests need and pip cannot give: WordNet 3.0 for METEOR's synonym stage (nltk's own
# downloader needs the network) and Chromium to check the HTML report headless. Installed when running
# as root with apt-get; otherwise a note says what to install.
SYSTEM_PACKAGES ?= wordnet-base chromium
system-deps:
	@missing=""; \
	test -f /usr/share/wordnet/data.noun || missing="$$missing wordnet-base"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "note: install these Debian packages for the full test suite:$$missing"; \
	  fi; \
	fi

# The venv, the CPU torch wheel, then the package (editable) with INSTALL_EXTRAS.
INSTALL_EXTRAS ?= $(EXTRAS)
install:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[$(INSTALL_EXTRAS)]"

# The full install holds the evaluation's extras too, so it stamps both.
$(STAMP): pyproject.toml
	$(MAKE) --no-print-directory install INSTALL_EXTRAS=$(EXTRAS)
	touch $(STAMP) $(EVAL_STAMP)

$(EVAL_STAMP): pyproject.toml
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then touch $@; \
	else $(MAKE) --no-print-directory install INSTALL_EXTRAS=$(EVAL_EXTRAS) && touch $@; fi

eval: setup-eval
	$(BIN)/harness eval --dataset $(DATASET) --model $(MODEL) --results-dir $(RESULTS) $(ARGS)

# One table per metric, datasets down, models across (ARGS="--baseline MODEL --format latex" etc.).
table: setup-eval
	$(BIN)/harness table $(RESULTS) $(ARGS)

# One self-contained HTML page: tables, charts and each run's provenance.
report: setup-eval
	$(BIN)/harness report $(RESULTS) $(ARGS)

# Ours vs published numbers for a suite in harness/records/suites/; non-zero exit on any MISS.
reproduce: setup-eval
	$(BIN)/harness reproduce $(SUITE) --results-dir $(RESULTS) $(ARGS)

# The fine-tuning workflow: every model on every dataset, then a table with the first model as baseline.
MODELS ?= $(MODEL)
compare: setup-eval
	$(BIN)/harness eval --dataset $(DATASET) --model $(MODELS) --results-dir $(RESULTS) $(ARGS)
	$(BIN)/harness table $(RESULTS) --datasets $(DATASET) --models $(MODELS) --baseline $(firstword $(MODELS))

lint: setup
	$(BIN)/ruff check .

# All tests, the slow end-to-end ones included (plain `pytest` skips the slow marker).
test: lint
	$(BIN)/pytest -m "slow or not slow"

test-fast: lint
	$(BIN)/pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
