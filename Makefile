# The two set-up commands of the README: `make demo` and `make test`.
# Both create (or reuse) .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed-$(shell cat setup.cfg constraints.txt | cksum | cut -d' ' -f1)

.PHONY: venv test demo horovod bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(STAMP): $(PY) setup.cfg constraints.txt
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e '.[train,video,plots,tensorboard,flow,test,clients]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

venv: $(STAMP)

# Horovod 0.28.1 patched for C++17 and built against the venv's torch; the wheel
# is cached under ~/.cache/summit-jobs/wheels so this is slow once per machine.
horovod: venv
	scripts/build-horovod.sh $(VENV)

# Three pytest-xdist workers by default, a test file each at a time, on 2 cores: much of the suite waits on
# subprocesses, LSF minutes, Slurm's 30-second time-limit checks and sockets, and a third worker fills that
# wait (the cores were busy 1.80 of 2 with two workers, 1.97 with three: 18 min 42 s -> 17 min 31 s for the
# same tests). Four were slower when measured (the multi-rank tests then fight for the cores). `make test PYTEST_XDIST=`
# runs one process.
PYTEST_XDIST ?= -n 3 --dist loadfile
test: venv
	$(PY) -m pytest -q $(PYTEST_XDIST) --durations=30

demo: venv
	$(PY) -m summit_jobs.demo

bench: venv
	$(PY) bench/cli_startup.py

clean:
	rm -rf $(VENV) build *.egg-info
