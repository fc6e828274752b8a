#!/usr/bin/env bash
# One idempotent set-up for every make target: the venv with the pinned packages,
# the package itself (editable), and the system programs the target needs.
#   scripts/setup.sh           venv + Graphviz (what `make book` needs)
#   scripts/setup.sh --browser also Chromium, for the offline browser check
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed

need_apt() {  # need_apt <command> <debian package> <conda hint>
    command -v "$1" >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing Debian's $2 (for $1)"
        if [ ! -f "$VENV/.apt-updated" ]; then
            apt-get update -qq >/dev/null
            mkdir -p "$VENV" && touch "$VENV/.apt-updated"
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
        command -v "$1" >/dev/null 2>&1 && return 0
    fi
    echo "setup: '$1' not found. Install it with 'sudo apt-get install $2'$3, then run make again." >&2
    exit 1
}

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "setup: '$PY' not found; install Python 3.11 (sudo apt-get install python3 python3-venv) or set PYTHON=/path/to/python3.11." >&2
    exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: Python >= 3.11 is needed ('$PY' is $("$PY" --version 2>&1)); set PYTHON=python3.11." >&2
    exit 1
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"

# Reinstall only when the pins or the package metadata changed.
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing the pinned environment into $VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[book,test]'
    echo "$want" > "$STAMP"
fi
# The notebooks are stored with kernelspec {"name": "python3", "display_name": "Python 3"}:
# point "python3" at this venv under that same display name, or JupyterLab rewrites the stored
# one and every chapter opens marked unsaved. Checked on every run, so older venvs are fixed too.
if ! grep -qs '"display_name": "Python 3",' "$VENV/share/jupyter/kernels/python3/kernel.json"; then
    "$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" >/dev/null
fi

need_apt dot graphviz " (or 'conda install -c conda-forge graphviz')"
if [ "${1:-}" = "--browser" ]; then
    need_apt chromium chromium " (the browser check drives it headless)"
fi
