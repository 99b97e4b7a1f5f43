#!/usr/bin/env bash
# The built package, checked as a user gets it (make wheel-check):
#   .ci/wheel_check.sh BUILD_PYTHON [--demo] PYTHON [[--demo] PYTHON ...] [--supported]
# BUILD_PYTHON (the project's venv: build, twine and mypy from the test extra) builds the sdist,
# then the wheel from the sdist, and checks their metadata and contents. Then, for each PYTHON,
# a fresh venv outside the source tree gets the wheel alone (core dependencies, no extras) and
# runs, from an empty folder, the README's Python snippet that needs no scikit-learn; `--demo`
# before a PYTHON also runs `topcal demo` there. `--supported` adds an interpreter for every other
# version pyproject.toml's classifiers name (python3.X on PATH, else pyenv's); one not found is a
# warning, and a failure under CI=true. The first failure ends the script non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_py=$1
# absolute, without resolving the venv's symlink: the steps below run in other folders
case "$build_py" in /*) ;; *) build_py="$(cd "$(dirname "$build_py")" && pwd)/$(basename "$build_py")" ;; esac
shift
work=$(mktemp -d "${TMPDIR:-/tmp}/topcal-wheel-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel-check: $*" >&2; exit 1; }
step() { echo "wheel-check: $*"; }

# -- build: sdist, then the wheel from the unpacked sdist (what `python -m build` does), so a
# file the sdist forgets fails here; the source tree gets no build/ or dist/ folder
step "building the sdist and the wheel"
"$build_py" -m build --outdir "$work/dist" "$root" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; fail "python -m build failed"; }
sdist=$(ls "$work"/dist/topcal-*.tar.gz)
wheel=$(ls "$work"/dist/topcal-*-py3-none-any.whl)
"$build_py" -m twine check --strict "$sdist" "$wheel"

# -- contents: what a user and a type checker need, and nothing from the tree's tests
"$build_py" - "$sdist" "$wheel" <<'PY'
import sys, tarfile, zipfile

sdist, wheel = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
need = ["topcal/py.typed", "topcal/_data/phanns_test_binned.csv", f"{info}/licenses/LICENSE"]
missing = [n for n in need if n not in names]
assert not missing, f"the wheel lacks {missing}"
meta = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
for line in ("License-Expression: MIT", "License-File: LICENSE", "Requires-Python: >=3.11"):
    assert line in meta, f"METADATA lacks {line!r}"
# the changelog ships as the second half of the long description
assert "# Changelog" in meta and "## [0.1.0]" in meta, "METADATA lacks the changelog"
assert not any(n.startswith(("tests/", "benchmarks/", "examples/")) for n in names), names
top = tarfile.open(sdist).getnames()[0].split("/")[0]
members = set(tarfile.open(sdist).getnames())
for n in ("LICENSE", "CHANGELOG.md", "README.md", "src/topcal/py.typed"):
    assert f"{top}/{n}" in members, f"the sdist lacks {n}"
print(f"wheel-check: contents ok ({len(names)} files in the wheel)")
PY

# -- the README's Python snippet that needs no scikit-learn (the one with load_phanns), as
# written in the README today
"$build_py" - "$root/README.md" "$work/snippet.py" <<'PY'
import re, sys

readme, out = sys.argv[1:]
blocks = re.findall(r"```python\n(.*?)```", open(readme).read(), re.S)
snippet = [b for b in blocks if "load_phanns" in b and "sklearn" not in b]
assert len(snippet) == 1, f"expected one README snippet with load_phanns, found {len(snippet)}"
open(out, "w").write(snippet[0])
PY

# the interpreters: the arguments, then with --supported one for each other supported version
pythons=()
for arg in "$@"; do
  if [ "$arg" != "--supported" ]; then pythons+=("$arg"); continue; fi
  have=" "
  for py in "${pythons[@]}"; do
    [ "$py" = "--demo" ] || have+="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') "
  done
  for v in $(grep -oE '"Programming Language :: Python :: 3\.[0-9]+"' "$root/pyproject.toml" \
      | grep -oE '3\.[0-9]+'); do
    case "$have" in *" $v "*) continue ;; esac
    found=""
    for cand in "python$v" "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$v".*/bin/python"$v"; do
      if "$cand" -c pass >/dev/null 2>&1; then found=$cand; break; fi
    done
    if [ -n "$found" ]; then
      pythons+=("$found")
    elif [ "${CI:-}" = "true" ]; then
      fail "no Python $v here to test the wheel on (a supported version: pyproject.toml)"
    else
      echo "wheel-check: warning: no Python $v found; the wheel is not tried on it" >&2
    fi
  done
done

demo=0
n=0
for py in "${pythons[@]}"; do
  if [ "$py" = "--demo" ]; then demo=1; continue; fi
  n=$((n + 1))
  version=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  venv="$work/venv-$n"
  step "Python $version ($py): a fresh venv with the wheel alone"
  "$py" -m venv "$venv"
  # --no-compile: no .pyc for the ~10,000 files of numpy, scipy, pandas, ... (half the install's
  # CPU time); Python compiles what the run imports
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "$wheel" \
    >"$work/pip-$n.log" 2>&1 \
    || { grep -v "is ignored" "$work/pip-$n.log" | tail -30; fail "pip could not install the wheel on Python $version"; }
  run="$work/run-$n"
  mkdir "$run"
  # from an empty folder with no PYTHONPATH: the installed package, never the source tree
  (
    cd "$run"
    unset PYTHONPATH
    "$venv/bin/python" - "$root" <<'PY'
import importlib.util, pathlib, sys

import topcal

where = pathlib.Path(topcal.__file__).resolve()
assert pathlib.Path(sys.argv[1]).resolve() not in where.parents, f"imported from the tree: {where}"
assert "site-packages" in where.parts, where
for extra in ("sklearn", "torch", "dask"):  # core only: the extras are not installed
    assert importlib.util.find_spec(extra) is None, f"{extra} came with the core install"
print(f"wheel-check: topcal {topcal.__version__} from {where.parent}")
PY
    "$venv/bin/python" "$work/snippet.py" >snippet.out
    test -s model.json || fail "the README snippet wrote no model.json"
    "$venv/bin/python" -c "import math, sys; v = float(open('snippet.out').read().split()[-1]); \
sys.exit(0 if math.isfinite(v) and 0 < v < 1 else 'the snippet printed %r' % v)"
    step "Python $version: README snippet ok (NLL $(tail -1 snippet.out))"
    "$venv/bin/topcal" --version
    if [ "$demo" = 1 ]; then
      "$venv/bin/topcal" demo -o demo-report >demo.out 2>demo.err \
        || { tail -20 demo.err; fail "topcal demo failed on Python $version"; }
      test -s demo-report/index.html || fail "topcal demo wrote no demo-report/index.html"
      grep -q "kde-mon2" demo.out || fail "topcal demo printed no kde-mon2 row"
      step "Python $version: topcal demo ok"
    fi
  )
  # a consumer's type checker sees the package's annotations (py.typed), no stubs needed
  if [ "$n" = 1 ]; then
    (cd "$run" && "$build_py" -m mypy --python-executable "$venv/bin/python" --strict \
      --no-incremental "$work/snippet.py") || fail "mypy could not read the installed types"
  fi
  demo=0
done
[ "$n" -gt 0 ] || fail "no Python to install the wheel on"
step "ok: sdist and wheel built, installed and run on $n Python version(s)"
