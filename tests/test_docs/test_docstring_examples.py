"""Every ``Examples`` block of the package's docstrings runs and prints what it shows
(:mod:`doctest` with ellipsis and normalised whitespace; one test per module)."""
import doctest
import importlib
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / 'mmposenc'
#: modules whose import has effects a test must not have (mmcv_ext installs itself as
#: mmcv._ext when loaded by the startup hook, not by import)
SKIP = {'mmposenc.ops.mmcv_ext'}


def modules():
    names = []
    for path in sorted(PACKAGE.rglob('*.py')):
        if '.mim' in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix('').parts)
        if parts[-1] == '__init__':
            parts.pop()
        name = '.'.join(parts)
        if name not in SKIP and '>>>' in path.read_text(encoding='utf-8'):
            names.append(name)
    return names


MODULES = modules()


def test_the_examples_are_found():
    assert len(MODULES) >= 30


@pytest.mark.parametrize('name', MODULES)
def test_docstring_examples_run(name):
    if name.startswith('mmposenc.models.detectors'):
        pytest.importorskip('mmdet')
    module = importlib.import_module(name)
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failed = []
    for test in finder.find(module, name):
        if test.examples:
            result = runner.run(test, out=failed.append)
            assert result.failed == 0, ''.join(failed)
