# Two commands do everything on a fresh Debian/Ubuntu machine:
#   make book   set up, build the static site, print its index page
#   make test   set up, then every check (unit tests, notebooks under nbval, site, offline browser check)
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
SITE  := _build/html
NB    ?=
# Test workers: unit tests and notebooks spread over this many processes (pytest-xdist).
JOBS  ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
# The notebooks are compared on torch's baseline CPU kernels with one thread: their stored
# outputs come from the machine's own (vectorised, multi-threaded) kernels, so a pass here
# shows that no compared output depends on the CPU a reader has.
PORTABLE := ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider

.PHONY: setup setup-browser book site test unit unit-fast notebooks notebooks-native browser lab execute bench compat clean

setup:
	@scripts/setup.sh

setup-browser:
	@scripts/setup.sh --browser

book: setup site
	@echo "Site: $(abspath $(SITE))/index.html"

# Built from the stored outputs; nbval is what executes the notebooks.
site:
	@$(PY) scripts/build_site.py

# worksteal: a worker that runs out of tests takes queued ones from the other, so a few
# long tests (torchrun jobs, the browser checks) do not leave one core idle at the end.
unit:
	$(PY) -m pytest -q -n $(JOBS) --dist worksteal tests

# Authors: the unit tests without the slow ones (multi-process DDP, the full checkpoint grid,
# the two-interpreter determinism check). `make test` still runs everything.
unit-fast:
	$(PY) -m pytest -q -n $(JOBS) --dist worksteal -m "not slow" tests

# One notebook per worker, its cells in order (--dist loadscope).
notebooks:
	$(PORTABLE) $(PY) -m pytest -q -n $(JOBS) --dist loadscope $(NBVAL) notebooks

# Authors: the same comparison on this machine's own kernels and thread count.
notebooks-native:
	$(PY) -m pytest -q -n $(JOBS) --dist loadscope $(NBVAL) notebooks

browser:
	$(PY) scripts/check_site.py $(SITE)

# The site is built from the stored outputs, so the browser check (mostly waiting on page
# loads) runs beside nbval (busy cores); each one's output is printed when it ends. (Running
# the unit tests beside them too was slower on 2 cores: 635 s against 592 s on a fresh clone.)
test: setup-browser
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory site
	$(MAKE) --no-print-directory -j2 --output-sync=target notebooks browser

# JupyterLab on the chapters, with the venv's kernel. The book's notebooks are trusted first
# (on every start, so a pulled change is trusted too), or JupyterLab shows stored SVG graphs as
# text; scripts/lab_config.py makes cross-chapter links open the chapter at the question and
# keeps a chapter from opening marked unsaved. tests/test_jupyterlab.py runs these same lines.
LAB_TRUST := $(VENV)/bin/jupyter trust notebooks/[0-9][0-9]_*.ipynb
LAB_ARGS  := --config=scripts/lab_config.py --notebook-dir=notebooks
lab: setup
	$(LAB_TRUST) >/dev/null
	$(VENV)/bin/jupyter lab $(LAB_ARGS) $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Authors: re-execute a notebook in place, top to bottom (make execute NB=notebooks/01_define_by_run.ipynb).
execute: setup
	@test -n "$(NB)" || { echo "usage: make execute NB=notebooks/<chapter>.ipynb"; exit 2; }
	$(PY) scripts/execute_notebook.py $(NB)

# torchviz and torchview are installed only here (the `bench` extra): the package never imports them.
bench: setup
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[bench]'
	$(PY) benchmarks/graph_scale.py
	$(PY) benchmarks/module_view.py
	$(PY) benchmarks/memory_overhead.py

# The package against another torch (make compat TORCH=2.14.1): a second venv, the unit
# tests and nbval under that torch. Not part of `make test`.
compat:
	@test -n "$(TORCH)" || { echo "usage: make compat TORCH=<version>, e.g. make compat TORCH=2.14.1"; exit 2; }
	@scripts/compat.sh "$(TORCH)"

clean:
	rm -rf _build
