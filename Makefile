# Spark AI Agent backend. `make dev` runs the local stack; `make test` checks everything.
SHELL := /bin/bash
UV_VERSION := 0.13.9
UV := .tools/bin/uv
PY := .venv/bin/python

.PHONY: setup dev test lint typecheck unit schemas bench clean

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

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## Install everything the project needs (Python from uv.lock, firebase-tools from
## package-lock.json, the Cloud Tasks emulator from tools/tasks_emulator/requirements.txt).
setup: .venv/.synced node_modules/.installed .tools/tasks-emulator/.installed

## Run the whole local stack: Firestore, Auth and Cloud Tasks emulators, the api function on
## :8080 (PORT overrides) and the tasks function on :8081.
dev: setup
	$(PY) -m tools.stack dev

## Lint, type-check, then run every test against freshly started emulators.
test: setup lint typecheck
	$(PY) -m tools.stack run -- $(PY) -m pytest

lint: .venv/.synced
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: .venv/.synced
	.venv/bin/mypy

## Unit tests only (no emulators).
unit: .venv/.synced
	$(PY) -m pytest tests/unit

## Regenerate schemas/firestore.schema.json after changing shared/schemas/documents.py.
schemas: .venv/.synced
	$(PY) -m shared.schemas.export

## Benchmarks (not part of `make test`).
bench: setup
	$(PY) bench/provider_overhead.py
	$(PY) -m tools.stack run -- $(PY) bench/stream_overhead.py
	$(PY) -m tools.stack run -- $(PY) bench/task_dispatch.py
	$(PY) -m tools.stack run -- $(PY) bench/rollover.py

clean:
	rm -rf .venv .tools node_modules .stack
