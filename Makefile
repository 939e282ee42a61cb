# Two entry points do all the set-up on a fresh machine:
#   make demo   - create .venv, install layercache, extract the built-in task set with MiniLM, print `info`,
#                 train an adaptive head on all four built-in tasks from the cache (8 epochs: validation
#                 0.995 against 0.997 after 16, in half the time), then write the probing report
#                 (runs/demo-cache.report/report.html; its probes fit a 4,000-word sample, --max-train)
#   make test   - create .venv, install layercache + test deps, run the test suite
#   make notebooks - run notebooks/*.ipynb top to bottom in a Jupyter kernel (notebooks/execute.py, as the
#                 test suite does); the executed copies, with outputs and figures, go to runs/notebooks/
# torch is installed only when the venv has none, as TORCH_SPEC (override for a CUDA build, e.g.
# `make demo TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu124"`).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup demo test notebooks clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet $(TORCH_SPEC)
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/layercache extract --out runs/demo-cache --overwrite
	$(BIN)/layercache info runs/demo-cache
	$(BIN)/layercache train-head runs/demo-cache --mixer adaptive --epochs 8 --out runs/demo-cache.runs/adaptive --overwrite
	$(BIN)/layercache probe-report runs/demo-cache --out runs/demo-cache.report

test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

notebooks: setup
	$(BIN)/python notebooks/execute.py

clean:
	rm -rf $(VENV) runs
