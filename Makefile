# The README names these targets. `make test` is what CI runs (.ci/run).
PY ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

.PHONY: venv lint test-unit test clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

lint: venv
	$(BIN)/ruff check tools tests filter_plugins
	$(BIN)/ruff format --check tools tests filter_plugins
	$(BIN)/mypy tools/acceldeploy filter_plugins/acceldeploy_filters.py
	$(BIN)/ansible-lint --profile production site.yml playbooks

test-unit: venv
	$(BIN)/pytest -q tests/unit

test: lint test-unit

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
