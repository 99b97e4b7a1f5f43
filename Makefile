# Quick start: `make demo` and `make test` on a fresh machine.
# Each creates (or reuses) .venv, installs the project and what it needs, then runs:
# `make demo` the core package only; `make test` the extras the tests use (torch, dask, ...).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
CORE_STAMP := $(VENV)/.topcal-core-installed
STAMP  := $(VENV)/.topcal-installed
# The test lanes (markers in pyproject.toml): the fast one for the inner loop, all of them for CI.
FAST   := not slow and not e2e and not browser and not examples
# Two workers on the 2-core machine; a module's tests stay on one worker (module-scoped fixtures).
XDIST  := -n 2 --dist loadfile
# pytest with bytecode cached under .venv (not in the tree), even where the environment sets
# PYTHONDONTWRITEBYTECODE: otherwise each worker compiles topcal and rewrites every test module
# again on every run (20-25 s of a core per run of the fast lane).
PYTEST := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache $(PY) -m pytest
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: demo test test-heavy test-fast lint wheel-check wheel-check-all examples docs install system-deps bench bench-heldout clean

# The core package alone (what `make demo` needs): no torch, no dask.
$(CORE_STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	@touch $(CORE_STAMP)

# torch is installed first and pinned: an unpinned torch would pull several GB.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[test,experiments,dask,docs]"
	@touch $(CORE_STAMP) $(STAMP)

install: $(STAMP)

# Debian packages the tests use: headless Chromium (the report test) and
# Fashion-MNIST (the ensemble experiment). Installed when missing and possible.
system-deps:
	@if ! command -v chromium >/dev/null 2>&1 || [ ! -d $(FASHION_MNIST) ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages chromium and dataset-fashion-mnist"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium dataset-fashion-mnist) >/dev/null \
	      || echo "warning: could not install chromium / dataset-fashion-mnist; tests needing them will skip (fail under CI=true)"; \
	  else \
	    echo "warning: chromium or Fashion-MNIST missing and apt-get unavailable; tests needing them will skip (fail under CI=true)"; \
	  fi; \
	fi

demo: $(CORE_STAMP)
	$(VENV)/bin/topcal demo

# The lint, every test but the heavy ones and the examples, the built wheel (under 8 minutes on
# the idle 2-core machine). CI (.ci/run) runs `make test-heavy` and `make docs` after it.
test: $(STAMP) system-deps lint
	$(PYTEST) -q $(XDIST) -m "not examples and not heavy"
	$(MAKE) --no-print-directory wheel-check

# The heavy tests (7 s or more of a core each: many-seed simulations, sklearn's check_estimator,
# Dask LocalClusters, whole reports at many classes, the docs pages' commands); CI runs them.
test-heavy: $(STAMP) system-deps
	$(PYTEST) -q $(XDIST) -m "heavy and not examples"

# The inner loop: no slow, end-to-end or browser test (under a minute on the idle machine).
test-fast: $(STAMP)
	$(PYTEST) -q $(XDIST) -m "$(FAST)"

# ruff (pinned in the test extra): pyflakes' errors and the 100-character line limit;
# mypy (pinned too): the types of src/, configured in pyproject.toml ([tool.mypy]).
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy

# The scripts of examples/ (the `examples` lane of tests/e2e/test_examples.py), one per worker.
examples: $(STAMP)
	$(PYTEST) -q -n 2 -m examples tests/e2e/test_examples.py tests/docs/test_docs_reference.py

# The documentation site (mkdocs.yml): the examples lane first, writing the examples' figures and
# summaries into docs/examples/output/ (not kept in git), then the site into site/ with
# --strict: a warning, a broken link or a missing include fails.
docs: $(STAMP)
	rm -rf docs/examples/output
	TOPCAL_EXAMPLES_OUT=$(CURDIR)/docs/examples/output \
	  $(PYTEST) -q -n 2 -m examples tests/e2e/test_examples.py tests/docs/test_docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The package as a user gets it: sdist and wheel built (python -m build), metadata checked
# (twine), the wheel alone installed into a fresh venv outside the tree, where `topcal demo` and
# the README's snippet run on $(PYTHON) and mypy reads the installed types.
wheel-check: $(STAMP)
	.ci/wheel_check.sh $(PY) --demo $(PYTHON)

# The same wheel on every Python version pyproject.toml's classifiers name (3.11-3.13; each found
# as python3.X or under pyenv; a missing one fails under CI=true): the README's snippet on each.
# CI runs it after make test (a fresh venv per version: about a minute of CPU each).
wheel-check-all: $(STAMP)
	.ci/wheel_check.sh $(PY) --supported

# Competitors for benchmarks/. netcal is installed without its declared
# dependencies (they would replace the pinned torch); these are the ones it imports.
bench: $(STAMP)
	$(PIP) install -e ".[bench]"
	$(PIP) install --no-deps netcal==1.4.0 tensorboard==2.21.0 protobuf==7.36.2 absl-py==2.5.1 pyro-ppl==1.9.2 opt_einsum==3.4.0
	@echo "run: $(PY) benchmarks/bench_kde.py | bench_temperature.py | bench_training.py | bench_labelshift.py"

# Held-out comparison with simple peers on shared/data/bench and PhANNs (long: ~1 h on 2 cores).
bench-heldout: $(STAMP)
	$(PIP) install -e ".[bench]"
	$(PY) benchmarks/bench_heldout.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .hypothesis
