# The two commands of the README. Both install everything they need into .venv first
# (tools/setup_env.sh is idempotent: a second run takes seconds and does not rebuild mmcv).
PY := .venv/bin/python

.PHONY: setup demo test test-fast
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

test: setup
	$(PY) -m pytest tests

test-fast: setup
	$(PY) -m pytest tests -m "not slow"
