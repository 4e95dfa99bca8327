# The two commands of the README:
#   make bench   set up .venv if needed, run the embedded default benchmark, print the boards
#   make test    set up .venv if needed, run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
CORES ?= 2
STAMP := $(VENV)/.sparsebench-installed

.PHONY: bench test test-slow install lint clean-results oracles mutants bench-sparse-training bench-peers slurm-up slurm-down test-slurm

install: $(STAMP)

# The suite's own bytecode, as pip writes it for an installed package but not for an editable
# one: with PYTHONDONTWRITEBYTECODE set, every job would compile the suite again (about 1 s of
# a one-cell run). Only changed files are compiled again.
COMPILE = $(PY) -m compileall -q suite methods kernels > /dev/null

# torch/torchvision are pinned and installed with pip (never uv/poetry: they would fetch 3 GB).
# The cpu kernel backend's C++ extension is compiled here, once (about a minute), as a package
# with a C extension is at install, rather than by whichever test or job first uses it.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -c 'from sparsebench.kernels.backends._cpu_build import load_extension as l; l()' \
		|| echo "note: the cpu kernel backend was not built now (see above); it builds on first use"
	$(COMPILE)
	touch $@

# One line per cell, then every pillar's leaderboard, summary.md, the claims and the report
# (results/default/report.html); fails when a cell failed or diverged (--strict). Then the
# wall-clock of the run against its cells' own time (perf overhead).
bench: $(STAMP)
	$(COMPILE)
	$(VENV)/bin/sparsebench run suite/benchmarks/default.yaml --cores $(CORES) --report --strict
	$(PY) -m sparsebench.suite.perf overhead results/default

# One pytest worker per core (pytest-xdist); `-n 0` runs them in one process. The fault and
# fuzz tests and the three-pillar end-to-end run (marker `slow`) are `make test-slow`, which
# CI runs too.
test: $(STAMP)
	$(COMPILE)
	$(VENV)/bin/python -m pytest -q -n auto --dist worksteal -m "not slow"

test-slow: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile -m slow

# The oracle tests against published peers (SAELens, FusionBench, SparseProp), which `make
# test` skips: a second venv layered on .venv (a .pth adds .venv's site-packages, so torch and
# the suite are shared, never reinstalled) holds the peers and what they pull in, which would
# otherwise change .venv's pins. SPARSEBENCH_ORACLES=1 makes a missing peer an error, not a skip.
ORACLES ?= .venv-oracles
ORACLE_STAMP := $(ORACLES)/.sparsebench-oracles-installed
ORACLE_TESTS := tests/methods/sae/test_saelens_oracle.py tests/methods/merging/test_fusion_bench.py \
	tests/kernels/test_sparseprop_oracle.py

$(ORACLE_STAMP): $(STAMP)
	test -x $(ORACLES)/bin/python || python3 -m venv $(ORACLES)
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')')" \
		> "$$($(ORACLES)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_sparsebench_base.pth"
	printf 'torch==2.14.1\ntorchvision==0.29.1\n' > $(ORACLES)/torch-pins.txt
	$(ORACLES)/bin/python -m pip install --quiet -c $(ORACLES)/torch-pins.txt pybind11 setuptools wheel
	$(ORACLES)/bin/python -m pip install --quiet --no-build-isolation -c $(ORACLES)/torch-pins.txt -e '.[oracles]'
	touch $@

oracles: $(ORACLE_STAMP)
	SPARSEBENCH_ORACLES=1 $(ORACLES)/bin/python -m pytest -q -p no:cacheprovider $(ORACLE_TESTS)

# The truly-sparse-training benchmark (docs/kernels.md, "Values-only training"): about 9
# minutes on 2 cores (BENCH_ARGS=--quick: a one-minute smoke run at width 512; --no-memory
# skips the per-variant memory processes); with `make oracles` done it runs in .venv-oracles
# and times SparseProp too.
BENCH_ARGS ?=
bench-sparse-training: $(STAMP)
	$(COMPILE)
	$$(test -x $(ORACLES)/bin/python && echo $(ORACLES)/bin/python || echo $(PY)) \
		-m sparsebench.kernels.bench_training --out results/sparse_training $(BENCH_ARGS)

# Our methods against published peers (docs/performance.md): merging vs FusionBench, SAE
# training vs SAELens and dictionary_learning, values-only steps vs SparseProp, one thread,
# interleaved; about 10 minutes on 2 cores. The peers (the `peers` extra: the oracles and
# dictionary-learning) go into .venv-oracles; writes results/peers/ (peers.json with the
# commit, board.md, board.csv, ratios.png). BENCH_ARGS=--quick: a smoke run; e.g.
# BENCH_ARGS='--before docs/data/peers-before.json' adds the before/after table.
PEER_STAMP := $(ORACLES)/.sparsebench-peers-installed

$(PEER_STAMP): $(ORACLE_STAMP)
	$(ORACLES)/bin/python -m pip install --quiet --no-build-isolation -c $(ORACLES)/torch-pins.txt -e '.[peers]'
	touch $@

bench-peers: $(PEER_STAMP)
	$(COMPILE)
	$(ORACLES)/bin/python -m benchmarks.peers --out results/peers $(BENCH_ARGS)

# A one-node SLURM on this machine (root, Debian's slurmctld slurmd slurm-client munge), to
# try profiles/slurm; its configuration goes to /etc/slurm/slurm.conf and is removed by down.
slurm-up: $(STAMP)
	$(PY) -m sparsebench.suite.slurm_local up

slurm-down: $(STAMP)
	$(PY) -m sparsebench.suite.slurm_local down

# The SLURM tests: the executor plugin (the `cluster` extra) and the cluster they start.
test-slurm: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet -e '.[cluster]'
	REQUIRE_SLURM=1 $(VENV)/bin/python -m pytest -q -m slurm tests/suite/test_slurm.py

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Mutation testing of methods/{sae,merging,dst,pruning} against their fast unit tests (mutmut,
# .ci/mutants.py; not part of `make test`): one worker, prints killed/total per family.
# FAMILIES="sae dst" for a subset; results stay in build/mutation/<family>/mutants/.
FAMILIES ?=
mutants: $(STAMP)
	$(PY) .ci/mutants.py run $(FAMILIES) --max-children 1
