"""Shared pieces of the reference-parity tests: loading the fixtures written by
``tests/reference/generate/*.py`` from the official code, the probe weights of their
gradients, and the ``parity`` fixture that compares and records the largest difference of
every check.

With ``MMPOSENC_PARITY_REPORT=<file.json>`` the records of the run are written there;
``python tests/reference/parity_table.py <file.json>`` turns them into the table of
``docs/reference_parity.md``.
"""
import json
import os
import pytest

from reference_parity import Parity

_RECORDS = []


@pytest.fixture
def parity(request):
    p = Parity(request.node.nodeid)
    yield p
    if p.checks:
        _RECORDS.append(dict(test=p.nodeid, max_abs_diff=p.max_diff, max_abs_ref=p.max_ref,
                             checks=p.checks, **p.info))


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get('MMPOSENC_PARITY_REPORT')
    if path and _RECORDS:
        with open(path, 'w') as f:
            json.dump(_RECORDS, f, indent=1)
