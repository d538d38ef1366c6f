"""Shared fixtures of the mmposenc test suite.

Real data lives outside the repository in ``../shared/data`` (override with
``MMPOSENC_SHARED_DATA``). Where it is absent the tests that need it skip with the reason; under
CI (``CI=true``) a missing folder fails them instead, so a broken CI checkout cannot pass by
skipping.
"""
import contextlib
import os
import os.path as osp

import pytest

if os.environ.get('PYTEST_XDIST_WORKER'):
    # `make test` runs the suite in pytest-xdist workers, one per core: one OpenMP thread per
    # worker (and per process a test starts) instead of every process spinning on every core.
    # Set before anything imports torch; an OMP_NUM_THREADS of the user's own is kept.
    os.environ.setdefault('OMP_NUM_THREADS', '1')
    os.environ.setdefault('MKL_NUM_THREADS', '1')

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
SHARED_DATA = os.environ.get('MMPOSENC_SHARED_DATA',
                             osp.join(osp.dirname(REPO_ROOT), 'shared', 'data'))
ON_CI = os.environ.get('CI', '').lower() in ('1', 'true', 'yes')


def _shared_dir(name):
    path = osp.join(SHARED_DATA, name)
    if not osp.isdir(path):
        msg = (f'real data folder {path} not found (expected ../shared/data/{name} beside '
               'the repository; set MMPOSENC_SHARED_DATA to point elsewhere)')
        if ON_CI:
            pytest.fail(msg + ' -- under CI this is a failure, not a skip')
        pytest.skip(msg)
    return path


@pytest.fixture(scope='session')
def coco128_root():
    """Root of ../shared/data/coco128 (COCO layout: annotations/, train2017/)."""
    return _shared_dir('coco128')


@pytest.fixture(scope='session')
def ade20k_sample_root():
    """Root of ../shared/data/ade20k_sample (sampleData/images, sampleData/annotations)."""
    return _shared_dir('ade20k_sample')


@pytest.fixture
def work_dir(tmp_path):
    """A fresh work_dir for a Runner."""
    d = tmp_path / 'work_dir'
    d.mkdir()
    return str(d)


def pytest_configure(config):
    config.addinivalue_line(
        'markers', 'slow: real-data training runs (seconds to minutes); run by CI, '
        'deselect with -m "not slow"')
    if not hasattr(config, 'workerinput'):
        fill_yapf_grammar_cache()


def fill_yapf_grammar_cache():
    """Write yapf's grammar pickles once, in pytest's first process, before any worker starts.

    On import yapf 0.43 pickles its grammars into ``~/.cache/YAPF`` whenever the cache is older
    than the installed grammar files (a fresh machine, a venv created since). It renames the
    temporary file into place before closing it, so a 1.2 kB grammar is still in the writer's
    buffer at the rename: a second process importing yapf in that instant reads an empty file
    (``EOFError: Ran out of input``). Two xdist workers that import yapf together on a fresh
    cache did exactly that under CI (78 errors in ``make test-hosts STACK=onedl``).
    """
    try:
        import yapf  # noqa: F401  (the import writes the cache)
    except ImportError:
        pass


@contextlib.contextmanager
def _default_scope_restored():
    """mmengine's default scopes (a process-wide registry of instances) as they were on entry."""
    from mmengine.registry import DefaultScope
    saved = DefaultScope._instance_dict.copy()
    try:
        yield
    finally:
        DefaultScope._instance_dict.clear()
        DefaultScope._instance_dict.update(saved)


@pytest.fixture(autouse=True)
def _isolate_default_scope():
    """Each test starts with the default scope it would have alone.

    mmengine keeps the default scope (``init_default_scope``, Runners) in a process-wide
    registry of instances, and unscoped types resolve in the *current* one: without this, a
    test that set 'mmdet' changes how the next test's 'ImageClassifier' resolves.
    """
    with _default_scope_restored():
        yield


@pytest.fixture(scope='module', autouse=True)
def _isolate_default_scope_per_module():
    """The same around each module: a module-scoped fixture that calls
    ``init_default_scope`` is set up before the per-test isolation above, so without this its
    scope stayed current for every later module (under pytest-xdist, whose workers run the
    modules in another order than a plain run, the classifiers of test_backbones / test_tools
    then resolved in 'mmdet')."""
    with _default_scope_restored():
        yield


@pytest.fixture(scope='session', autouse=True)
def _memoized_package_lookups():
    """Memoize what mmengine re-reads from the installed packages for every ``pkg::`` base.

    For each ``mmdet::`` / ``mmposenc::`` ... base of each config it parses, mmengine reloads
    ``pkg_resources`` (``is_installed``) and reads the package's whole model index (mmdet: ~100
    metafiles, ~0.3 s; mmseg's metafiles end in ``.yaml``, mmdet's in ``.yml``): three
    quarters of the time of parsing a config with host bases. Both
    depend only on the installed files, which no test changes in this process (installs are
    tested in throwaway environments and fresh processes), so each is read once per session;
    the config loading itself (mmposenc's registration included) is mmengine's, unchanged.
    """
    import functools

    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils

    def memo_yaml(load):  # mmengine only reads the loaded metafiles: no copies needed
        cached = functools.lru_cache(maxsize=None)(load)
        return lambda file, *args, **kwargs: (
            cached(file) if not args and not kwargs and str(file).endswith(('.yml', '.yaml'))
            else load(file, *args, **kwargs))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config_module, 'is_installed',
                   functools.lru_cache(maxsize=None)(config_module.is_installed))
        mp.setattr(config_utils, 'load', memo_yaml(config_utils.load))
        yield


@pytest.fixture(scope='session', autouse=True)
def _memoized_config_formatting():
    """Memoize the yapf formatting of ``Config.pretty_text`` on its unformatted text.

    A Runner formats its whole config 4-5 times (the logged config, the dumped file, the
    runtime-info hook, each checkpoint's meta): ~0.5-1 CPU-s each for a detector, about 40 %
    of an in-process train + test of a small DETR. yapf's output is a function of the text
    and the style alone, so equal texts are formatted once per session; the text each config
    gives is mmengine's, unchanged (fresh processes -- the tools as users run them -- format
    as always). mmengine 0.10.7 calls its module's ``FormatCode``, onedl-mmengine 0.10.12
    imports yapf's at each call: :func:`forked_runs.format_code_owner` finds which.
    """
    from forked_runs import format_code_owner, memoized_format_code
    owner = format_code_owner()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(owner, 'FormatCode', memoized_format_code(owner.FormatCode, 256))
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` (``make test``), keep together on one worker what shares an
    expensive fixture: every test that uses a module-scoped fixture of its own module is put in
    that module's group (a model, a checkpoint or a clone made once, not once per worker). A
    test's explicit ``xdist_group`` mark wins. Runs before pytest-xdist reads the marks."""
    if not getattr(config.option, 'loadgroup', False):  # set by pytest-xdist's --dist
        return
    for item in items:
        if item.get_closest_marker('xdist_group') is not None:
            continue
        module = item.nodeid.split('::')[0]
        defs = getattr(getattr(item, '_fixtureinfo', None), 'name2fixturedefs', {})
        if any(d and d[-1].scope == 'module' and d[-1].baseid == module
               for d in defs.values()):
            item.add_marker(pytest.mark.xdist_group(module))


# The reference-parity tests (tests/test_reference): the ``parity`` fixture compares with the
# official code's fixtures and records each check's largest difference; with
# ``MMPOSENC_PARITY_REPORT=<file.json>`` the records are written there at the end of the run
# (``python tests/reference/parity_table.py <file.json>`` makes the table of
# docs/reference_parity.md). Kept here: a second ``conftest.py`` would shadow this one's names
# for the tests that import them.
_PARITY_RECORDS = []


@pytest.fixture
def parity(request):
    from reference_parity import Parity
    p = Parity(request.node.nodeid)
    yield p
    if p.checks:
        _PARITY_RECORDS.append(dict(test=p.nodeid, max_abs_diff=p.max_diff,
                                    max_abs_ref=p.max_ref, checks=p.checks, **p.info))


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get('MMPOSENC_PARITY_REPORT')
    if path and _PARITY_RECORDS:
        import json
        with open(path, 'w') as f:
            json.dump(_PARITY_RECORDS, f, indent=1)
