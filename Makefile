# The two commands of the README. Both install everything they need first (tools/setup_env.sh is
# idempotent: a second run takes seconds).
#
# STACK=upstream|onedl picks the host family (requirements/<stack>.txt), ROUTE=ops-free|compiled
# whether mmcv's ops are compiled; the defaults (upstream, ops-free) compile nothing and use
# .venv, the others .venv-<stack>-<route>.
STACK ?= upstream
ROUTE ?= ops-free
ifeq ($(STACK)-$(ROUTE),upstream-ops-free)
VENV ?= .venv
else
VENV ?= .venv-$(STACK)-$(ROUTE)
endif
PY := $(VENV)/bin/python
export MMPOSENC_STACK := $(STACK)
export MMPOSENC_ROUTE := $(ROUTE)
export MMPOSENC_VENV := $(abspath $(VENV))

.PHONY: setup setup-docs demo test test-fast test-hosts test-gpu gpu-check docs
setup:
	bash tools/setup_env.sh

demo: setup
	$(PY) tools/demo.py

# The suite runs in pytest-xdist workers, one per core of the 2-core CI machine (TEST_WORKERS=auto:
# one per core of this one). --dist loadgroup keeps the tests that share a module's expensive
# fixture, or the throwaway wheel environment, on one worker (tests/conftest.py); each worker,
# and every process a test starts, runs torch with one thread.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

test: setup
	$(PYTEST) tests

test-fast: setup
	$(PYTEST) tests -m "not slow"

# The host-integration tests (what differs between stacks and routes: the hosts' imports, the
# mmcv ops and their PyTorch kernels, a train and a predict step of every config family, the
# install into each family); CI runs them on the stacks and routes that `make test` does not.
HOST_TESTS := tests/test_stack tests/test_ops tests/test_packaging/test_host_families.py
test-hosts: setup
	$(PYTEST) $(HOST_TESTS)

# On a machine with a CUDA GPU: tests/test_gpu (CUDA paths against the CPU, AMP steps, a train
# and a predict step of every DETR-family and Mask2Former config) and the route tests, on the
# route chosen; gpu-check runs both routes (the compiled one needs the CUDA toolkit, nvcc).
test-gpu: setup
	$(PY) -m pytest tests/test_gpu tests/test_ops -v -rs

gpu-check:
	$(MAKE) test-gpu ROUTE=ops-free
	$(MAKE) test-gpu ROUTE=compiled

# The documentation site: Sphinx (requirements/docs.txt, installed only here) builds docs/ into
# docs/_build/html with warnings as errors, then every internal link of the site is checked and
# no page may show an unrendered {placeholder}.
setup-docs:
	bash tools/setup_docs.sh

docs: setup-docs
	$(PY) -m sphinx -W --keep-going -b html -j 1 docs docs/_build/html
	$(PY) tools/misc/check_docs_links.py docs/_build/html
