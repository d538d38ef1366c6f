"""mmposenc as an installed OpenMMLab package: requirements, `mmposenc::` configs, mim, wheel.

What a user outside the repository can do, tested here:

- `import mmposenc` with only torch, mmengine and mmcv (and their own requirements) installed;
- `_base_ = 'mmposenc::<folder>/<file>.py'` in a config of their own, loaded after
  `import mmposenc` (our tools/train.py, tools/test.py and `mim train mmposenc` import it first),
  with the editable install and with the wheel in a fresh virtual environment;
- without the startup hook (MMPOSENC_NO_STARTUP_HOOK=1), `custom_imports` cannot make
  `mmposenc::` bases load (mmengine resolves `_base_` before it imports `custom_imports`,
  tested); with it, the hosts' own entry points load them (test_startup_hook.py);
- `mim search mmposenc` / `mim train mmposenc CONFIG`: with the wheel as they are; with the
  editable install with the repository root first on PYTHONPATH (mim locates packages as
  `<location of the installed metadata>/mmposenc`, which an editable install lacks; the
  repository's `mmposenc.egg-info` gives mim the source tree instead; `mim train` with the
  editable install: test_user_project_tools.py).
"""
import ast
import importlib.metadata as md
import os
import os.path as osp
import re
import runpy
import shutil
import subprocess
import sys
import zipfile

import pytest
from packaging.requirements import Requirement

from conftest import REPO_ROOT

HOSTS = {'det': 'mmdet', 'seg': 'mmsegmentation', 'cls': 'mmpretrain'}
VENV_SITE = next(p for p in sys.path if p.endswith('site-packages') and sys.prefix in p)
QUIET = ('-W', 'ignore')  # pkg_resources' deprecation warnings (mmengine imports it)


def _norm(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def _setup():
    """Requirement constants of setup.py (without running setup())."""
    return runpy.run_path(osp.join(REPO_ROOT, 'setup.py'), run_name='setup_under_test')


def _pins():
    pins = {}
    with open(osp.join(REPO_ROOT, 'requirements', 'pins.txt')) as f:
        for line in f:
            line = line.split('#')[0].strip()
            if '==' in line and not line.startswith('@'):
                name, version = line.split('==')
                pins[_norm(name)] = version.strip()
    return pins


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
def test_install_requires_and_extras_match_the_pins():
    """Every requirement names a pinned package and the pinned version satisfies it; the
    hosts are the extras det / seg / cls, and `all` is their union."""
    ns, pins = _setup(), _pins()
    reqs = list(ns['INSTALL_REQUIRES'])
    extras = ns['EXTRAS_REQUIRE']
    assert {k: [Requirement(r).name for r in v][0] for k, v in extras.items()
            if k in HOSTS} == HOSTS
    assert sorted(extras['all']) == sorted({r for k in HOSTS for r in extras[k]})
    for r in reqs + [r for v in extras.values() for r in v]:
        req = Requirement(r)
        assert _norm(req.name) in pins, f'{r} is not pinned in requirements/pins.txt'
        assert req.specifier.contains(pins[_norm(req.name)], prereleases=True), (
            f'{r} excludes the pinned {req.name}=={pins[_norm(req.name)]}')
    assert {_norm(Requirement(r).name) for r in reqs} == {
        'torch', 'mmengine', 'mmcv', 'numpy', 'setuptools'}


def test_torch_floor_is_the_one_the_checkpoint_loader_needs(monkeypatch):
    """setup.py's torch floor is mmposenc.engine.checkpoint.MIN_TORCH_VERSION (the oldest
    torch with every torch.serialization API the loader calls); TORCH_APIS lists every such
    call in the module, and a torch that lacks one is refused with one line naming the
    floor."""
    import torch
    from packaging.version import Version

    from mmposenc.engine import checkpoint
    torch_req = next(Requirement(r) for r in _setup()['INSTALL_REQUIRES']
                     if Requirement(r).name == 'torch')
    floors = [s.version for s in torch_req.specifier if s.operator == '>=']
    assert floors == [checkpoint.MIN_TORCH_VERSION], torch_req
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


def test_every_imported_package_is_declared():
    """A module-level import of the package is covered by install_requires (or their own
    requirements); mmposenc/models/detectors may use mmdet (extra `det`); imports inside
    functions may use any extra."""
    ns = _setup()
    base = _closure(Requirement(r).name for r in ns['INSTALL_REQUIRES'])
    extras = {_norm(Requirement(r).name) for r in ns['EXTRAS_REQUIRE']['all']}
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
                    allowed = base | extras
                assert dists & allowed, (
                    f'{rel} imports {module} ({sorted(dists)}) at '
                    f'{"module" if module_level else "function"} level; declare it in setup.py')


def test_import_with_only_torch_mmengine_mmcv(tmp_path):
    """`import mmposenc` (and `mmposenc.models`) in an interpreter that sees only the files of
    install_requires and their requirements: a site-packages of symlinks to exactly those
    distributions' files, no user site, no .pth files, no PYTHONPATH."""
    ns = _setup()
    dists = _closure(Requirement(r).name for r in ns['INSTALL_REQUIRES'])
    assert {'torch', 'mmengine', 'mmcv'} <= dists
    assert not dists & {'mmdet', 'mmsegmentation', 'mmpretrain', 'torchvision'}
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


USER_CONFIG = """\
# a user's own config, outside the repository
_base_ = 'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py'
model = dict(peg_after=(0, 1))
"""
LOAD = """\
import sys
{imports}
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1])
print(cfg.model.type, cfg.model.encoder_pos, cfg.model.peg_after, cfg.default_scope,
      cfg.custom_imports.imports)
"""


# One fresh interpreter with the startup hook off (MMPOSENC_NO_STARTUP_HOOK=1; the hook is
# tested in test_startup_hook.py) imports what the parses import besides mmposenc (torch, mmcv,
# mmdet's models: the detectors' custom_imports), then forks one child per parse, each starting
# with nothing of mmposenc imported (asserted) and mmposenc unregistered, as a fresh interpreter.
PARSES = """\
import os, sys, traceback
import torch, mmcv.cnn, mmdet.models
from mmengine.config import Config
from mmengine.config.utils import MODULE2PACKAGE
assert 'mmposenc' not in sys.modules and 'mmposenc' not in MODULE2PACKAGE


def our_loader():
    sys.path.insert(0, {tools!r})
    from _runner_utils import load_config
    cfg = load_config('user.py')
    print(cfg.model.type, cfg.work_dir)
    import mmposenc  # what the loader did first: then mmengine's Config parses it
    {load}


def host_parse():
    try:
        Config.fromfile('user_custom_imports.py')
        print('parsed')
    except Exception as err:
        print(f'{{type(err).__name__}}: {{err}}')
    print('mmposenc' in sys.modules)
    # inheriting our config by its path needs no import before parsing
    {load_by_path}


for check in (our_loader, host_parse):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            check()
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, check.__name__
"""
PRINT_CFG = ("print(cfg.model.type, cfg.model.encoder_pos, cfg.model.peg_after, "
             "cfg.default_scope, cfg.custom_imports.imports)")


@pytest.fixture(scope='module')
def parses(tmp_path_factory):
    """The output of ``PARSES``, run from a folder outside the repository holding the user's
    config, the same with ``custom_imports = dict(imports=['mmposenc'])``, and the same
    inheriting our config by its path."""
    folder = tmp_path_factory.mktemp('user_project')
    (folder / 'user.py').write_text(USER_CONFIG)
    (folder / 'user_custom_imports.py').write_text(
        USER_CONFIG + "custom_imports = dict(imports=['mmposenc'], allow_failed_imports=False)\n")
    config = osp.join(REPO_ROOT, 'configs', 'peg_detr', 'detr-peg_r50_16xb2-50e_coco.py')
    (folder / 'by_path.py').write_text(USER_CONFIG.replace(
        'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py', config))
    code = PARSES.format(tools=osp.join(REPO_ROOT, 'tools'),
                         load="cfg = Config.fromfile('user.py')\n    " + PRINT_CFG,
                         load_by_path="cfg = Config.fromfile('by_path.py')\n    " + PRINT_CFG)
    return _run([sys.executable, *QUIET, '-c', code], cwd=str(folder),
                env=_env(MMPOSENC_NO_STARTUP_HOOK='1'))


def test_user_config_inherits_an_mmposenc_config(parses):
    """Editable install, a config outside the repository parsed from a folder outside the repo
    (``PARSES``, hook off): through tools/train.py's loader (load_config imports mmposenc
    itself, first), and then with mmengine's Config after `import mmposenc` (what the loader
    does first)."""
    loader, plain = parses.stdout.split('\n')[:2]
    assert loader.strip() == 'mmposenc.PEGDETR ./work_dirs/user', parses.stdout
    assert plain == ("mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"), (
        parses.stdout)


def test_without_the_startup_hook_mmposenc_must_be_imported_before_parsing(parses):
    """What the hosts' tools/train.py does (Config.fromfile first) with the startup hook
    turned off (``PARSES``): `custom_imports` in the config does not help, since mmengine
    resolves `_base_` before it imports them; inheriting our config by its path does."""
    refused, imported, loaded = parses.stdout.split('\n')[2:5]
    assert refused == 'AssertionError: mmengine does not support to load mmposenc config.'
    assert imported == 'False'
    assert loaded == "mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"


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


# ------------------------------------------------------------------ training, real data ------
def _train_config(tmp_path, coco128_root):
    """A tiny PEG-DETR (mmdet's DETR-R18 smoke config, encoder PE swapped for a PEG) on
    COCO128, inherited through `mmposenc::`; 2 iterations, no validation."""
    data_root = coco128_root.rstrip('/') + '/'
    path = tmp_path / 'peg_detr_tiny.py'
    path.write_text(f"""\
_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)
model = dict(type='mmposenc.PEGDETR', encoder_pos='peg')
train_dataloader = dict(dataset=dict(data_root={data_root!r}))
val_dataloader = val_evaluator = val_cfg = None
test_dataloader = test_evaluator = test_cfg = None
train_cfg = dict(max_iters=2)
default_hooks = dict(checkpoint=dict(interval=2))
""")
    return str(path)


def _assert_trained_peg_detr(work_dir):
    import torch
    ckpt = torch.load(osp.join(work_dir, 'iter_2.pth'), map_location='cpu', weights_only=False)
    assert any(k.startswith('encoder.pegs.0.') for k in ckpt['state_dict'])
    assert ckpt['meta']['iter'] == 2


# ------------------------------------------------------------------ the wheel ---------------
def _copy_source(dst):
    """The files a build needs, without the work tree's venv, caches and outputs."""
    ignore = shutil.ignore_patterns('__pycache__', '*.pyc', '.mim', '*.egg-info', 'build',
                                    'dist', 'work_dirs', 'data', '*.pth', '*.onnx')
    os.makedirs(dst)
    for name in ('setup.py', 'model-index.yml', '_mmposenc_startup.py', 'mmposenc-startup.pth',
                 'mmposenc', 'configs', 'tools'):
        src = osp.join(REPO_ROOT, name)
        if osp.isdir(src):
            shutil.copytree(src, osp.join(dst, name), ignore=ignore)
        else:
            shutil.copy(src, dst)


_WHEEL_ENVIRONMENT = {}


def wheel_environment(tmp_path_factory):
    """A throwaway environment with mmposenc installed from its wheel, built once per session
    and shared with test_startup_hook.py (building and installing the wheel is what both
    test; each checks its own part of the result): a copy of the source (``src``), the wheel
    built from it by ``pip wheel`` (``wheel``), a fresh venv without pip or setuptools of its
    own holding the wheel alone (``python``, its ``site`` folder), and a .pth file that appends
    this venv's site-packages for the pinned stack (torch, mmcv, mmengine, the hosts, openmim).
    A plain path in a .pth file adds the folder without running its .pth files, so the
    editable mmposenc of this venv is not importable there."""
    if not _WHEEL_ENVIRONMENT:
        tmp = tmp_path_factory.mktemp('wheel_env')
        src, dist, venv = str(tmp / 'src'), str(tmp / 'dist'), str(tmp / 'venv')
        _copy_source(src)
        _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
              '--disable-pip-version-check', '-w', dist, src], cwd=str(tmp))
        wheel, = [osp.join(dist, f) for f in os.listdir(dist) if f.endswith('.whl')]
        _run([sys._base_executable, '-m', 'venv', '--without-pip', venv], cwd=str(tmp))
        py = osp.join(venv, 'bin', 'python')
        _run([sys.executable, '-m', 'pip', '--python', py, 'install', '--no-deps', '--no-index',
              '--disable-pip-version-check', wheel], cwd=str(tmp))
        site = _run([py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                    cwd=str(tmp)).stdout.strip()
        with open(osp.join(site, 'pinned_stack.pth'), 'w') as f:
            f.write(VENV_SITE + '\n')
        _WHEEL_ENVIRONMENT.update(src=src, wheel=wheel, python=py, site=site)
    return dict(_WHEEL_ENVIRONMENT)


@pytest.mark.slow
@pytest.mark.xdist_group('wheel_environment')  # one worker builds it (see wheel_environment)
def test_wheel_in_a_fresh_virtual_environment(tmp_path, tmp_path_factory, coco128_root):
    """`pip wheel .` holds the package and .mim/{configs,tools,model-index.yml}; installed
    into a fresh venv it serves `mmposenc::` configs, `mim search` and `mim train`.

    The fresh venv (:func:`wheel_environment`) gets the wheel alone and this venv's
    site-packages as a plain path: the test checks that mmposenc and its metadata come from
    the wheel, and that mmengine's own get_installed_path (not our wrapper) finds the
    installed package.
    """
    env = wheel_environment(tmp_path_factory)
    src, wheel, py, site = env['src'], env['wheel'], env['python'], env['site']
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {osp.relpath(osp.join(r, f), src) for r, _, fs in os.walk(osp.join(src, 'configs'))
               for f in fs if f.endswith(('.py', '.yml', '.md'))}
    in_wheel = {n[len('mmposenc/.mim/'):] for n in names
                if n.startswith('mmposenc/.mim/configs/')}
    assert in_wheel == shipped and len(shipped) > 100
    for f in ('mmposenc/__init__.py', 'mmposenc/utils/config_package.py',
              'mmposenc/.mim/model-index.yml', 'mmposenc/.mim/tools/train.py',
              'mmposenc/.mim/tools/_runner_utils.py', 'mmposenc/.mim/tools/test.py'):
        assert f in names, f

    project = tmp_path / 'project'
    project.mkdir()
    (project / 'user.py').write_text(USER_CONFIG)
    code = LOAD.format(imports=(
        'import mmposenc, importlib.metadata as md\n'
        'from mmengine.utils import get_installed_path\n'
        'print(mmposenc.__file__, md.distribution("mmposenc")._path, '
        'get_installed_path("mmposenc"))'))
    res = _run([py, *QUIET, '-c', code, 'user.py'], cwd=str(project))
    where, loaded = res.stdout.strip().split('\n')[:2]
    package = osp.join(site, 'mmposenc')
    assert where.split() == [osp.join(package, '__init__.py'),
                             osp.join(site, 'mmposenc-0.1.0.dist-info'), package]
    assert loaded == "mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"

    res = _run([py, *QUIET, '-m', 'mim', 'search', 'mmposenc', '--valid-config'],
               cwd=str(project))
    listed = re.findall(r"'([^']+)'", res.stdout.split('valid config ids:')[-1])
    assert sorted(listed) == _model_names(src)

    cfg = _train_config(project, coco128_root)
    work_dir = str(project / 'work')
    res = _run([py, *QUIET, '-m', 'mim', 'train', 'mmposenc', cfg, '--work-dir', work_dir],
               cwd=str(project))
    assert osp.join(package, '.mim', 'tools', 'train.py') in res.stdout
    _assert_trained_peg_detr(work_dir)
