"""mmposenc as an installed OpenMMLab package: requirements, imports, `mmposenc::` configs, mim.

What a user outside the repository can do, tested here:

- `import mmposenc` with only torch, mmengine and mmcv (and their own requirements) installed;
- `import mmposenc` registers the `mmposenc::` config package (mmengine's table and our
  wrapper of its package lookup);
- `mim search mmposenc` with the editable install, with the repository root first on
  PYTHONPATH (mim locates packages as `<location of the installed metadata>/mmposenc`, which an
  editable install lacks; the repository's `mmposenc.egg-info` gives mim the source tree).

What runs from a user's folder in fresh interpreters is in test_startup_hook.py: a config of
their own with `_base_ = 'mmposenc::<folder>/<file>.py'` through our tools/train.py's loader and
with the startup hook off (`custom_imports` cannot make `mmposenc::` bases load: mmengine
resolves `_base_` before it imports `custom_imports`), through the hosts' own entry points with
the hook, the wheel in a fresh virtual environment (`mim search`, `mim train mmposenc`), and
`PYTHONPATH=<repo> mim train mmposenc` with the editable install followed by our tools/test.py.
"""
import ast
import importlib.metadata as md
import os
import os.path as osp
import re
import runpy
import subprocess
import sys

import pytest
from packaging.requirements import Requirement

from conftest import REPO_ROOT
from stack_info import DISTRIBUTIONS, STACK, mmcv_distribution, pins

VENV_SITE = next(p for p in sys.path if p.endswith('site-packages') and sys.prefix in p)
QUIET = ('-W', 'ignore')  # pkg_resources' deprecation warnings (mmengine imports it)


def _norm(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def _setup():
    """Requirement constants of setup.py (without running setup())."""
    return runpy.run_path(osp.join(REPO_ROOT, 'setup.py'), run_name='setup_under_test')


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env.setdefault('OMP_NUM_THREADS', '1')
    env.update(extra)
    return env


def _run(args, cwd, env=None, timeout=600, check=True):
    res = subprocess.run(args, cwd=cwd, env=env or _env(), capture_output=True, text=True,
                         timeout=timeout)
    if check:
        assert res.returncode == 0, (
            f'{args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}')
    return res


# ------------------------------------------------------------------ requirements -----------
def test_requirements_name_no_host_and_the_extras_match_each_stacks_pins():
    """install_requires is numpy alone (no host of either family: see setup.py); the extras
    `upstream` and `onedl` name one family each, every requirement is pinned in that stack's
    requirements file and admits the pinned version, and its range lies inside the range
    mmposenc checks at import (mmposenc.utils.hosts.SUPPORTED)."""
    from packaging.version import Version

    from mmposenc.utils.hosts import SUPPORTED
    ns = _setup()
    assert ns['INSTALL_REQUIRES'] == ['numpy']
    extras = ns['EXTRAS_REQUIRE']
    assert set(extras) == {'upstream', 'onedl'}
    module_of = {}
    for module, (_, _, dists) in SUPPORTED.items():
        for family, names in dists.items():
            for name in names.split(' or '):
                module_of[_norm(name)] = module
    for stack, reqs in extras.items():
        pinned = {_norm(k): v for k, v in pins(stack).items()}
        hosts = set()
        for r in reqs:
            req = Requirement(r)
            name = _norm(req.name)
            assert name in pinned, f'{r} is not pinned in requirements/{stack}.txt'
            assert req.specifier.contains(pinned[name], prereleases=True), (
                f'{r} excludes the pinned {req.name}=={pinned[name]}')
            if name not in module_of:
                continue
            hosts.add(module_of[name])
            low, high, _ = SUPPORTED[module_of[name]]
            for spec in req.specifier:
                bound = Version(spec.version)
                assert bound >= Version(low) and (high is None or bound <= Version(high)), (
                    f'{r}: outside mmposenc.utils.hosts.SUPPORTED[{module_of[name]!r}]')
        assert hosts == {'mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain'}, (stack, hosts)


def test_torch_floor_is_the_one_the_checkpoint_loader_needs(monkeypatch):
    """The torch floor mmposenc checks at import is
    mmposenc.engine.checkpoint.MIN_TORCH_VERSION (the oldest torch with every
    torch.serialization API the loader calls); TORCH_APIS lists every such call in the module,
    and a torch that lacks one is refused with one line naming the floor."""
    import torch
    from packaging.version import Version

    from mmposenc.engine import checkpoint
    from mmposenc.utils.hosts import SUPPORTED
    assert SUPPORTED['torch'][0] == checkpoint.MIN_TORCH_VERSION
    assert Version(checkpoint.MIN_TORCH_VERSION) >= Version('2.6')
    used = set(re.findall(r'torch\.serialization\.(\w+)\(',
                          open(checkpoint.__file__, encoding='utf-8').read()))
    assert used == set(checkpoint.TORCH_APIS)
    monkeypatch.delattr(torch.serialization, 'get_unsafe_globals_in_checkpoint')
    with pytest.raises(ImportError, match=r'mmposenc needs torch>=2\.6 .*'
                       r'get_unsafe_globals_in_checkpoint\); found torch '):
        checkpoint.register_safe_loaders()


def _imports(path):
    """(top-level module, at module level?) of every absolute import in a file."""
    tree = ast.parse(open(path, encoding='utf-8').read())
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        for name in names:
            yield name.split('.')[0], id(node) in top


def _closure(names):
    """Distributions needed by ``names`` (their requirements, recursively; no extras)."""
    seen, todo = set(), [_norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({'extra': ''}):
                todo.append(_norm(req.name))
    return seen


def _host_distributions(modules):
    """This environment's distributions of the host ``modules`` (either family)."""
    names = []
    for module in modules:
        if module == 'torch':
            names.append('torch')
        elif module == 'mmcv':
            names.append(mmcv_distribution())
        else:
            names.append(DISTRIBUTIONS[module][STACK])
    return names


#: The hosts every part of mmposenc may import at module level (checked at `import mmposenc`)
CORE_HOSTS = ('torch', 'mmengine', 'mmcv')


def test_every_imported_package_is_declared_or_a_checked_host():
    """A module-level import of the package is numpy (install_requires), a host that
    `import mmposenc` checks (torch, mmengine, mmcv) or one of their requirements;
    mmposenc/models/detectors may use mmdet (checked when it is imported); imports inside
    functions may use any host."""
    ns = _setup()
    base = _closure([Requirement(r).name for r in ns['INSTALL_REQUIRES']]
                    + _host_distributions(CORE_HOSTS))
    hosts = _closure(_host_distributions(['mmdet', 'mmseg', 'mmpretrain']) + ['torchvision'])
    owners = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    for root, _, files in os.walk(osp.join(REPO_ROOT, 'mmposenc')):
        for f in files:
            if not f.endswith('.py'):
                continue
            path = osp.join(root, f)
            rel = osp.relpath(path, REPO_ROOT)
            for module, module_level in _imports(path):
                if module in stdlib or module == 'mmposenc':
                    continue
                dists = {_norm(d) for d in owners.get(module, [])}
                assert dists, f'{rel} imports {module}, which no installed distribution provides'
                allowed = base
                if not module_level or rel.startswith(osp.join('mmposenc', 'models',
                                                               'detectors')):
                    allowed = base | hosts
                assert dists & allowed, (
                    f'{rel} imports {module} ({sorted(dists)}) at '
                    f'{"module" if module_level else "function"} level; declare or check it')


def test_import_with_only_torch_mmengine_mmcv(tmp_path):
    """`import mmposenc` (and `mmposenc.models`) in an interpreter that sees only the files of
    numpy, torch, mmengine and mmcv (this stack's distributions) and their requirements: a
    site-packages of symlinks to exactly those distributions' files, no user site, no .pth
    files, no PYTHONPATH."""
    dists = _closure(['numpy'] + _host_distributions(CORE_HOSTS))
    assert {'torch', _norm(mmcv_distribution())} <= dists
    assert not dists & ({_norm(d) for m in ('mmdet', 'mmseg', 'mmpretrain')
                         for d in DISTRIBUTIONS[m].values()} | {'torchvision'})
    site = tmp_path / 'site-packages'
    site.mkdir()
    tops = set()
    for name in dists:
        for f in md.distribution(name).files or []:
            if f.parts[0] not in ('..', '__pycache__') and not f.parts[0].endswith('.pth'):
                tops.add(f.parts[0])
    for top in tops:
        if osp.exists(osp.join(VENV_SITE, top)):
            os.symlink(osp.join(VENV_SITE, top), site / top)
    os.symlink(osp.join(REPO_ROOT, 'mmposenc'), site / 'mmposenc')
    code = (f'import sys; sys.path.append({str(site)!r})\n'  # where site-packages would be
            'import mmposenc, mmposenc.models\n'
            'for host in ("mmdet", "mmseg", "mmpretrain", "torchvision"):\n'
            '    try:\n'
            '        __import__(host)\n'
            '        sys.exit(f"{host} is visible")\n'
            '    except ImportError:\n'
            '        pass\n'
            'print(mmposenc.__file__)\n')
    res = _run([sys.executable, '-I', '-S', *QUIET, '-c', code], cwd=str(tmp_path))
    assert res.stdout.strip() == str(site / 'mmposenc' / '__init__.py')


# ------------------------------------------------------------------ mmposenc:: configs -------
def test_register_config_package():
    from mmengine.config import config as config_module
    from mmengine.config.utils import MODULE2PACKAGE, PKG2PROJECT
    from mmengine.utils import get_installed_path

    import mmposenc
    from mmposenc.utils import PACKAGE_DIR, register_config_package
    assert MODULE2PACKAGE['mmposenc'] == 'mmposenc' and PKG2PROJECT is MODULE2PACKAGE
    register_config_package()  # idempotent: one wrapper, not a chain
    wrapped = config_module.get_installed_path
    assert wrapped.__wrapped__ is get_installed_path
    assert wrapped('mmposenc') == PACKAGE_DIR == osp.dirname(mmposenc.__file__)
    assert wrapped('mmdet') == get_installed_path('mmdet')
    assert osp.isfile(osp.join(PACKAGE_DIR, '.mim', 'model-index.yml'))


def _model_names(root):
    import yaml
    index = yaml.safe_load(open(osp.join(root, 'model-index.yml')))
    return sorted(m['Name'] for p in index['Import']
                  for m in yaml.safe_load(open(osp.join(root, p)))['Models'])


def _assert_mim_sees_the_repository():
    """What `PYTHONPATH=<repo> mim ...` relies on: pkg_resources (mim's locator) finds the
    repository's mmposenc.egg-info first, so mim's package folder is <repo>/mmposenc."""
    res = _run([sys.executable, *QUIET, '-c',
                'import pkg_resources as pr; print(pr.get_distribution("mmposenc").location)'],
               cwd=REPO_ROOT, env=_env(PYTHONPATH=REPO_ROOT))
    assert osp.samefile(res.stdout.strip(), REPO_ROOT), (
        f'mim would look for mmposenc in {res.stdout.strip()}, not in the repository: '
        f'{osp.join(REPO_ROOT, "mmposenc.egg-info")} exists: '
        f'{osp.isdir(osp.join(REPO_ROOT, "mmposenc.egg-info"))} (tools/setup_env.sh writes it)')


def test_mim_search_lists_every_model_from_the_editable_install(tmp_path):
    """`PYTHONPATH=<repo> mim search mmposenc` with the editable install."""
    _assert_mim_sees_the_repository()
    names = _model_names(REPO_ROOT)
    assert len(names) >= 60
    res = _run([sys.executable, *QUIET, '-m', 'mim', 'search', 'mmposenc', '--valid-config'],
               cwd=str(tmp_path), env=_env(PYTHONPATH=REPO_ROOT))
    listed = re.findall(r"'([^']+)'", res.stdout.split('valid config ids:')[-1])
    assert sorted(listed) == names
