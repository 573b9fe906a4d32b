# Every target bootstraps its own virtualenv in .venv (Python 3.11+ as $(PYTHON)).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
NPM ?= npm
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

LINT_PATHS := src tests migrations $(wildcard bench)

.PHONY: run demo voice-demo test web screenshots lint format rpc-types bench bench-results clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "coach needs Python 3.11 or newer")'
	@echo "Installing coach and its dependencies into $(VENV) (once, or after pyproject.toml changes; a few minutes)..."
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## run: chat with the agents in this terminal (COACH_USER=name picks your identity)
# COACH_USER goes to the shell as one single-quoted word, taken literally (spaces,
# quotes, $), each ' written as '\''.
run: $(STAMP)
	$(PY) -m coach chat $(if $(value COACH_USER),--user '$(subst ','\'',$(value COACH_USER))')

## demo: a first visit, then a second that resumes it, against a scripted fake model
# No LLM, no network. The demo's own SQLite file, DEMO_DIR/coach.db, is emptied on
# every run and kept afterwards to look at (the demo prints how).
DEMO_DIR ?= .demo
demo: $(STAMP)
	$(PY) -m coach demo --dir '$(DEMO_DIR)'

## voice-demo: two spoken visits (a barge-in, then a spoken resume) through the local
##   voice stack: silero VAD, espeak-ng, pocketsphinx, the real OpenAI plugins
# Needs Debian's espeak-ng. VOICE_DEMO_DIR/coach.db is emptied on every run and kept.
VOICE_DEMO_DIR ?= .voice-demo
voice-demo: $(STAMP)
	$(PY) -m coach.testing.voice_demo --dir '$(VOICE_DEMO_DIR)'

# web/'s npm packages (Node.js and npm): the browser client, its tests, the RPC types.
WEB_STAMP := web/node_modules/.installed-$(shell cksum web/package-lock.json | cut -d' ' -f1)

$(WEB_STAMP): web/package.json web/package-lock.json
	npm ci --prefix web --no-audit --no-fund --loglevel=error
	@touch $@

## test: every test: the web client's unit and browser tests (Node.js, and Chromium at
##   /usr/bin/chromium or $$CHROMIUM), then Python's (needs PostgreSQL on 127.0.0.1:5432)
test: $(STAMP) $(WEB_STAMP)
	@status=0; \
	$(NPM) run --prefix web --silent test:unit || status=1; \
	browser="$${CHROMIUM:-/usr/bin/chromium}"; \
	if [ -x "$$browser" ]; then \
		$(NPM) run --prefix web --silent test:browser || status=1; \
	else \
		echo "make test: no Chromium at $$browser, so the browser tests cannot run (apt-get install chromium, or set CHROMIUM=/path/to/chromium); the Python suite runs anyway" >&2; \
		status=1; \
	fi; \
	$(PY) -m pytest -q -n auto --dist worksteal || status=$$?; \
	exit $$status

## web: build the browser client into src/coach/surfaces/web_client (the package ships it)
web: $(WEB_STAMP)
	npm run --prefix web --silent build

## screenshots: the browser tests' screenshots, saved into docs/screenshots for the README
screenshots: $(WEB_STAMP)
	SCREENSHOT_DIR='$(CURDIR)/docs/screenshots' npm run --prefix web --silent test:browser

## rpc-types: regenerate web/src/rpc.ts (and its schema) from the RPC models
rpc-types: $(STAMP) $(WEB_STAMP)
	$(PY) -m coach.surfaces.rpc > web/src/rpc.schema.json
	npm run --prefix web --silent rpc-types

lint: $(STAMP) $(WEB_STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) -m ruff format --check $(LINT_PATHS)
	$(PY) -m mypy
	npm run --prefix web --silent typecheck

format: $(STAMP)
	$(PY) -m ruff check --fix $(LINT_PATHS)
	$(PY) -m ruff format $(LINT_PATHS)

# The bench also needs the anchors it compares coach with (the `bench` extra).
BENCH_STAMP := $(VENV)/.bench-$(shell cksum pyproject.toml | cut -d' ' -f1)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@rm -f $(VENV)/.bench-*
	@touch $@

## bench: coach's persistence next to its anchors; BENCH_ARGS=--quick for a smoke run
bench: $(BENCH_STAMP)
	$(PY) -m bench.core $(BENCH_ARGS)

## bench-results: every target of issue 25 from one run (~15-25 min); rewrites the
##   generated part of docs/benchmarks.md and docs/bench/ (BENCH_ARGS=--quick ... for a smoke run)
bench-results: $(BENCH_STAMP)
	$(PY) -m bench.results $(BENCH_ARGS)

clean:
	rm -rf $(VENV) web/node_modules .pytest_cache .mypy_cache .ruff_cache
