#!/usr/bin/env bash
# The package against another torch, in a venv of its own:
#   scripts/compat.sh 2.14.1          (or: make compat TORCH=2.14.1)
#
# Builds .venv-torch<version> (ignored by git, kept for the next run), installs
# torch==<version> and the package with its `test` and `book` extras, every other package at the
# project's pins (constraints.txt minus its torch line), then runs the unit tests and the
# notebooks under nbval with that torch. Nothing is registered outside that venv: its
# "python3" kernelspec lives in the venv (--sys-prefix), and there is no pytest cache.
# Ends with one verdict line; the exit status is 0 only when everything passed.
set -uo pipefail
cd "$(dirname "$0")/.."

ver=${1:-}
if [[ ! $ver =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
    echo "usage: scripts/compat.sh <torch version>, e.g. scripts/compat.sh 2.14.1" >&2
    exit 2
fi
PY=${PYTHON:-python3}
VENV=.venv-torch$ver
VPY=$VENV/bin/python
# pip's constraints cannot be overridden on the command line, so the torch pin is left
# out of a copy; every other package stays at the version the project tests with.
cons=$(mktemp)
trap 'rm -f "$cons"' EXIT
grep -viE '^torch[[:space:]]*==' constraints.txt > "$cons"

verdict() {  # verdict <PASS|FAIL> <details>
    echo "compat torch==$ver: $1 ($2)"
}

start=$SECONDS
if [ ! -x "$VPY" ]; then
    "$PY" -m venv "$VENV" || { verdict FAIL "could not create $VENV with $PY"; exit 1; }
fi
echo "== installing torch==$ver and the package into $VENV"
# The `book` extra too: the site, notebook-rules and JupyterLab tests use its tools.
if ! "$VPY" -m pip install -q --disable-pip-version-check -c "$cons" "torch==$ver" \
        '.[book,test]'; then
    verdict FAIL "pip could not install torch==$ver with the package's pins"
    exit 1
fi
# The notebooks' kernelspec "python3" must start this venv's interpreter (the JupyterLab test
# checks it); --sys-prefix keeps the registration inside the venv, as scripts/setup.sh does.
"$VPY" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (torch $ver)" >/dev/null
got=$("$VPY" -c 'import torch; print(torch.__version__)')
echo "== torch $got in $VENV (install $((SECONDS - start)) s)"
if [ "${got%%+*}" != "$ver" ]; then
    verdict FAIL "asked for torch==$ver, the venv has $got"
    exit 1
fi

# The working tree's package, not the copy pip installed: what is tested is what is here.
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# Where the claims of the two releases differ, the chapters and tests ask
# autogradviz/versions.py (agv.version_fact) what the running torch should do.
echo "== unit tests"
t0=$SECONDS
"$VPY" -m pytest -q -p no:cacheprovider tests
unit=$?
unit_s=$((SECONDS - t0))
echo "== notebooks under nbval"
t0=$SECONDS
"$VPY" -m pytest -q -p no:cacheprovider --nbval --nbval-current-env \
    --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks
nb=$?
nb_s=$((SECONDS - t0))

summary="unit tests exit $unit ($unit_s s), notebooks exit $nb ($nb_s s), $((SECONDS - start)) s in all"
if [ "$unit" -eq 0 ] && [ "$nb" -eq 0 ]; then
    verdict PASS "torch $got: $summary"
    exit 0
fi
verdict FAIL "torch $got: $summary"
exit 1
