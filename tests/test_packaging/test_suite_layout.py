"""The suite collects on every machine: pytest imports test modules and conftest files by
basename (``rootdir`` import mode, no ``__init__.py``), so two files of one name shadow each other
(``import file mismatch``, or ``from conftest import ...`` reading the wrong one), depending on the
order in which a worker happens to import them."""
import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_module_basenames_are_unique():
    names = collections.defaultdict(list)
    for path in TESTS.rglob('*.py'):
        if path.name != '__init__.py':
            names[path.name].append(str(path.relative_to(TESTS)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def test_one_conftest():
    assert [str(p.relative_to(TESTS)) for p in TESTS.rglob('conftest.py')] == ['conftest.py']
