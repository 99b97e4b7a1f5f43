# Quick start: `make demo` and `make test` on a fresh machine.
# Each creates (or reuses) .venv, installs the project and what it needs, then runs.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --quiet --disable-pip-version-check
STAMP  := $(VENV)/.topcal-installed
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.PHONY: demo test install system-deps bench bench-heldout clean

# torch is installed first and pinned: an unpinned torch would pull several GB.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[test,experiments,dask]"
	@touch $(STAMP)

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

demo: $(STAMP)
	$(VENV)/bin/topcal demo

test: $(STAMP) system-deps
	$(PY) -m pytest -q

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
