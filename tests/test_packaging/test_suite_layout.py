"""The suite collects on every machine: pytest imports test modules and conftest files by
basename (``rootdir`` import mode, no ``__init__.py``), so two files of one name shadow each other
(``import file mismatch``, or ``from conftest import ...`` reading the wrong one), depending on the
order in which a worker happens to import them. Nor may two workers race for a cache file
that the first import of a library writes (yapf's grammar pickles)."""
import collections
import os
import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parents[1]


def test_module_basenames_are_unique():
    names = collections.defaultdict(list)
    for path in TESTS.rglob('*.py'):
        if path.name != '__init__.py':
            names[path.name].append(str(path.relative_to(TESTS)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


def test_one_conftest():
    assert [str(p.relative_to(TESTS)) for p in TESTS.rglob('conftest.py')] == ['conftest.py']


def test_first_process_fills_yapf_cache_and_workers_do_not(tmp_path):
    # conftest's pytest_configure in a fresh cache folder: as a worker (config.workerinput set)
    # it must leave the cache alone, as pytest's first process it must leave complete pickles.
    code = (
        'import glob, pickle, sys, types\n'
        f'sys.path.insert(0, {str(TESTS)!r})\n'
        'import conftest\n'
        'config = types.SimpleNamespace(addinivalue_line=lambda *a: None, workerinput={})\n'
        'conftest.pytest_configure(config)\n'
        'pattern = sys.argv[1] + "/YAPF/*/*.pickle"\n'
        'print(len(glob.glob(pattern)))\n'
        'del config.workerinput\n'
        'conftest.pytest_configure(config)\n'
        'print(sorted(len(pickle.load(open(p, "rb"))) > 0 for p in glob.glob(pattern)))\n')
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    out = subprocess.run([sys.executable, '-c', code, str(tmp_path)], env=env, check=True,
                         capture_output=True, text=True).stdout.split('\n')
    assert out[:2] == ['0', '[True, True]']
