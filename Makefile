# The two commands of the README. Both install everything they need into .venv first
# (tools/setup_env.sh is idempotent: a second run takes seconds and does not rebuild mmcv).
PY := .venv/bin/python

.PHONY: setup setup-docs demo test test-fast docs
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

# The suite runs in pytest-xdist workers, one per core of the 2-core CI machine (TEST_WORKERS=auto:
# one per core of this one). --dist loadgroup keeps the tests that share a module's expensive
# fixture, or the throwaway wheel environment, on one worker (tests/conftest.py); each worker,
# and every process a test starts, runs torch with one thread.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadgroup

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

# The documentation site: Sphinx (requirements/docs.txt, installed only here) builds docs/ into
# docs/_build/html with warnings as errors, then every internal link of the site is checked.
setup-docs:
	bash tools/setup_docs.sh

docs: setup-docs
	$(PY) -m sphinx -W --keep-going -b html -j 1 docs docs/_build/html
	$(PY) tools/misc/check_docs_links.py docs/_build/html
