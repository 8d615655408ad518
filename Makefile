# Spark AI Agent backend. `make dev` runs the local stack; `make test` checks everything.
SHELL := /bin/bash
UV_VERSION := 0.13.9
UV := .tools/bin/uv
PY := .venv/bin/python
CHECKOV := .tools/checkov/bin/checkov

.PHONY: setup dev test lint typecheck checkov package unit schemas bench clean

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

# checkov pins its own large dependency tree: it gets its own virtualenv, from a
# hash-pinned requirements file (tools/checkov/requirements.in says how it was made).
.tools/checkov/.installed: tools/checkov/requirements.txt
	python3 -m venv .tools/checkov
	.tools/checkov/bin/pip install --quiet --require-hashes --no-deps -r tools/checkov/requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

## Install everything the project needs (Python from uv.lock, firebase-tools from
## package-lock.json, the Cloud Tasks emulator from tools/tasks_emulator/requirements.txt,
## checkov from tools/checkov/requirements.txt).
setup: .venv/.synced node_modules/.installed .tools/tasks-emulator/.installed .tools/checkov/.installed

## Run the whole local stack: Firestore, Auth and Cloud Tasks emulators, the api function on
## :8080 (PORT overrides) and the tasks function on :8081.
dev: setup
	$(PY) -m tools.stack dev

## Lint, type-check, scan the Terraform, then run every test against freshly started emulators.
test: setup lint typecheck checkov
	$(PY) -m tools.stack run -- $(PY) -m pytest

lint: .venv/.synced
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

typecheck: .venv/.synced
	.venv/bin/mypy

## Static checks of terraform/ (no network: --skip-download). Every skip is justified
## inline, and tests/terraform checks that it is.
checkov: .tools/checkov/.installed
	$(CHECKOV) --directory terraform --framework terraform --skip-download --compact --quiet

## The functions' source archive for Terraform, dist/functions.zip: the same bytes for the
## same commit.
package: .venv/.synced
	$(PY) -m tools.package dist/functions.zip

## Unit tests only (no emulators).
unit: .venv/.synced
	$(PY) -m pytest tests/unit

## Regenerate schemas/*.json (the documents clients read, the OpenAPI document) after changing shared/schemas/.
schemas: .venv/.synced
	$(PY) -m shared.schemas.export

## Benchmarks (not part of `make test`).
bench: setup
	$(PY) bench/provider_overhead.py
	$(PY) -m tools.stack run -- $(PY) bench/stream_overhead.py
	$(PY) -m tools.stack run -- $(PY) bench/task_dispatch.py
	$(PY) -m tools.stack run -- $(PY) bench/rollover.py
	$(PY) bench/conversation_cost.py
	$(PY) bench/attachments.py

clean:
	rm -rf .venv .tools node_modules .stack
