# The two commands of the README:
#   make bench   set up .venv if needed, run the embedded default benchmark, print the boards
#   make test    set up .venv if needed, run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
CORES ?= 2
STAMP := $(VENV)/.sparsebench-installed

.PHONY: bench test install lint clean-results mutants

install: $(STAMP)

# torch/torchvision are pinned and installed with pip (never uv/poetry: they would fetch 3 GB).
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Ends in every pillar's leaderboard and results/default/summary.md (printed), then the
# wall-clock of the run against its cells' own time (perf overhead).
bench: $(STAMP)
	@start=$$(date +%s); $(VENV)/bin/snakemake --cores $(CORES) || exit $$?; \
	end=$$(date +%s); cat results/default/summary.md && \
	$(PY) -m sparsebench.suite.perf overhead results/default --wall $$((end - start)) \
		--cores $(CORES) --since $$start

# One pytest worker per core (pytest-xdist); `-n 0` runs them in one process.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist worksteal

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# Mutation testing of methods/{sae,merging,dst,pruning} against their fast unit tests (mutmut,
# .ci/mutants.py; not part of `make test`): one worker, prints killed/total per family.
# FAMILIES="sae dst" for a subset; results stay in build/mutation/<family>/mutants/.
FAMILIES ?=
mutants: $(STAMP)
	$(PY) .ci/mutants.py run $(FAMILIES) --max-children 1
