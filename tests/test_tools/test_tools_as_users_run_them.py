"""The tools of ``tools/`` as a user runs them (issue 19, items 4-6).

- From a ``git clone`` of the repository that was never installed: each tool imports the
  clone's ``mmposenc`` (not the copy installed in the environment) and ``mmposenc::`` bases
  resolve from the clone's ``configs/`` although it has no ``mmposenc/.mim``.
- From the user's own working directory: the tools change no directory, write only where the
  user asked (``tools/benchmark/run_all.py`` without ``--out`` prints its table, it does not
  overwrite the tracked ``docs/benchmarks.md``) and read the user's relative paths against
  that directory.
- ``tools/demo.py --quick`` on a COCO tree uses a few images of it, not the whole tree
  (its run from the user's folder: test_detection_demo.py).
- ``tools/train.py --resume``: a checkpoint that does not exist is refused before anything
  is built (nothing to resume is said in the first line of the log: test_train_test_tools.py,
  on that module's training).

The clone is the repository as it is on disk (the committed tree plus uncommitted changes), so
that the code under test is the code of this checkout.
"""
import ast
import glob
import json
import os
import os.path as osp
import shutil
import subprocess
import textwrap

import pytest

from conftest import REPO_ROOT
from forked_runs import run_tools
from tool_files import load_tool

TOOLS_DIR = osp.join(REPO_ROOT, 'tools')
SMOKE = 'smoke/detr_r18_1xb2-8it_coco128.py'


def _tool_files():
    files = sorted(glob.glob(osp.join(TOOLS_DIR, '**', '*.py'), recursive=True))
    return [osp.relpath(f, TOOLS_DIR) for f in files]


def _imports_mmposenc(path, seen=()):
    """Whether the file imports mmposenc, itself or through a module of tools/ it imports."""
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split('.')[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split('.')[0])
    if 'mmposenc' in names:
        return True
    for name in names - set(seen):
        for folder in (osp.dirname(path), TOOLS_DIR):
            local = osp.join(folder, name + '.py')
            if osp.isfile(local) and _imports_mmposenc(local, (*seen, *names)):
                return True
    return False


def _git(*args):
    return subprocess.run(['git', '-C', REPO_ROOT, *args], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope='module')
def clone(tmp_path_factory):
    """``git clone`` of this repository into a temporary folder, never installed, with the
    uncommitted changes of the working tree copied over (tracked files as on disk, untracked
    files that git does not ignore)."""
    if shutil.which('git') is None or not osp.isdir(osp.join(REPO_ROOT, '.git')):
        pytest.skip('needs git and a git checkout of the repository')
    dst = str(tmp_path_factory.mktemp('clone') / 'mmposenc')
    subprocess.run(['git', 'clone', '-q', '--no-hardlinks', REPO_ROOT, dst], check=True)
    changed = _git('ls-files', '-z', '--modified', '--others', '--exclude-standard')
    for rel in filter(None, changed.split('\0')):
        src = osp.join(REPO_ROOT, rel)
        if osp.isfile(src):
            os.makedirs(osp.dirname(osp.join(dst, rel)), exist_ok=True)
            shutil.copy2(src, osp.join(dst, rel))
    for rel in filter(None, _git('ls-files', '-z', '--deleted').split('\0')):
        if osp.isfile(osp.join(dst, rel)):
            os.remove(osp.join(dst, rel))
    assert not osp.exists(osp.join(dst, 'mmposenc', '.mim'))  # as never installed
    return dst


# ---------------------------------------------------------- a clone that was never installed
#: Imports each tool of a checkout as ``python <tool>`` would (``sys.path[0]`` = the tool's
#: folder, its top-level code run) and records where ``mmposenc`` is found the first time it is
#: imported: by the tool's own top-level code, or afterwards (as its functions would). One
#: fresh process for all tools (a script run by clone_cli_runs): a finder placed first on ``sys.meta_path`` records the location the
#: path finders give for the current ``sys.path`` and then serves the package imported once.
PROBE = r'''
import importlib.abc, importlib.machinery, importlib.util, json, os, runpy, sys

tools_dir, tools, out = sys.argv[1], json.loads(sys.argv[2]), {}
base_path, base_argv = list(sys.path[1:]), list(sys.argv)
loaded = {}


class Probe(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name != 'mmposenc':
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, sys.path)
        out.setdefault(current, spec.origin if spec is not None else None)
        if 'module' not in loaded:
            return None  # the first import: by the regular finders
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return loaded['module']

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Probe())
for current in tools:
    sys.path[:] = [os.path.dirname(current)] + base_path
    sys.argv = [current]
    sys.modules.pop('mmposenc', None)
    for name, module in list(sys.modules.items()):  # the modules of tools/ run again
        if (getattr(module, '__file__', None) or '').startswith(tools_dir + os.sep):
            del sys.modules[name]
    try:
        runpy.run_path(current, run_name='probed_tool')
        import mmposenc  # what the tool's functions import later
    finally:
        loaded.setdefault('module', sys.modules.get('mmposenc'))
print(json.dumps(out))
'''


def test_every_tool_imports_the_mmposenc_of_its_own_checkout(clone_cli_runs):
    """Every tool of a clone that was never installed imports the clone's mmposenc, also
    where another mmposenc is installed in the environment (this repository's)."""
    tools, res = clone_cli_runs['probed'], clone_cli_runs['probe']
    assert len(tools) > 20
    assert res.returncode == 0, res.stderr[-3000:]
    found = json.loads(res.stdout.splitlines()[-1])
    clone = clone_cli_runs['clone']
    expected = osp.join(clone, 'mmposenc', '__init__.py')
    wrong = {osp.relpath(t, clone): found.get(t) for t in tools if found.get(t) != expected}
    assert not wrong, f'these tools import another mmposenc than {expected}: {wrong}'


def _user_config(folder, base, extra=''):
    """A config of the user's project that inherits ``base``; it records the file of the
    mmposenc the tool imported (a config is Python run by the tool's process)."""
    path = osp.join(str(folder), 'my_config.py')
    with open(path, 'w') as f:
        f.write(f"_base_ = '{base}'\nimport mmposenc as _m\nmmposenc_file = _m.__file__\n"
                + textwrap.dedent(extra))
    return path


def _coco128_options(root):
    root = root.rstrip('/') + '/'
    ann = root + 'annotations/instances_train2017.json'
    return ['--cfg-options', f'train_dataloader.dataset.data_root={root}',
            f'val_dataloader.dataset.data_root={root}',
            f'test_dataloader.dataset.data_root={root}', f'val_evaluator.ann_file={ann}',
            f'test_evaluator.ann_file={ann}']


@pytest.fixture(scope='module')
def marker_config(clone):
    """A config that exists in the clone only: an ``mmposenc::`` base naming it resolves only
    from the clone's configs/, not from another installed mmposenc."""
    name = 'smoke/only_in_this_clone.py'
    with open(osp.join(clone, 'configs', name), 'w') as f:
        f.write(f"_base_ = './{osp.basename(SMOKE)}'\n")
    return name


#: What the clone's tools' processes share (tests/forked_runs.py): imported once, before the
#: forks (never mmposenc)
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmdet.models', 'mmdet.datasets',
           'mmdet.engine', 'mmdet.evaluation', 'mmdet.visualization')


@pytest.fixture(scope='module')
def clone_cli_runs(request, clone, marker_config, tmp_path_factory):
    """The clone's tools as a user runs them, each a fresh process forked from one interpreter
    that imported torch, mmengine and mmdet, never mmposenc (tests/forked_runs.py), from
    folders of the user's:

    - ``probe``: PROBE on every tool of the clone that imports mmposenc (``probed``);
    - ``resume``: tools/train.py on a user config with an ``mmposenc::`` base of the clone and
      ``--resume missing.pth``;
    - ``table``: tools/benchmark/run_all.py --quick --only cape, without --out (in a folder
      that must stay empty);
    - ``out``: the same with ``--out bench/table.md``;
    - ``train`` (where COCO128 is there and test_clone_trains_a_user_config_from_the_users_folder
      runs): tools/train.py, 1 iteration of a user config with an ``mmposenc::`` base of the
      clone on COCO128, into the relative --work-dir ``work`` of the user's folder ``train``.
    Also ``tracked``: the clone's docs/benchmarks.md before the runs, ``folders``: the runs'.
    """
    folders = {name: tmp_path_factory.mktemp(name) for name in ('probe', 'resume', 'table',
                                                                'out', 'train')}
    probed = [osp.join(clone, 'tools', t) for t in _tool_files() if not t.startswith('_')
              and _imports_mmposenc(osp.join(TOOLS_DIR, t))]
    probe = folders['probe'] / 'probe.py'
    probe.write_text(PROBE)
    cfg = _user_config(folders['resume'], f'mmposenc::{marker_config}')
    tracked = osp.join(clone, 'docs', 'benchmarks.md')
    before = open(tracked).read()
    bench = [osp.join(clone, 'tools', 'benchmark', 'run_all.py'), '--quick', '--only', 'cape']
    runs = dict(probe=[str(probe), osp.join(clone, 'tools'), json.dumps(probed)],
                resume=[osp.join(clone, 'tools', 'train.py'), cfg, '--resume', 'missing.pth'],
                table=bench, out=bench + ['--out', 'bench/table.md'])
    if any(item.originalname == 'test_clone_trains_a_user_config_from_the_users_folder'
           and item.module is request.module for item in request.session.items):
        try:
            root = request.getfixturevalue('coco128_root')
        except pytest.skip.Exception:
            root = None  # the test skips on its own coco128_root
        if root is not None:
            cfg = _user_config(folders['train'], f'mmposenc::{marker_config}',
                               'train_cfg = dict(max_iters=1, val_interval=1)\n'
                               'default_hooks = dict(checkpoint=dict(interval=1))\n')
            runs['train'] = [osp.join(clone, 'tools', 'train.py'), cfg, '--work-dir', 'work',
                             '--no-validate'] + _coco128_options(root)
    done = run_tools([dict(argv=argv, cwd=str(folders[name])) for name, argv in runs.items()],
                     preload=PRELOAD)
    return dict(zip(runs, done), tracked=(tracked, before), folders=folders, clone=clone,
                probed=probed)


def test_clone_train_tool_resolves_mmposenc_bases_from_the_clone(clone_cli_runs):
    """The clone's tools/train.py parses a user config with an ``mmposenc::`` base of the clone
    (no .mim: before, ``FileNotFoundError: .../mmposenc/.mim/model-index.yml``) and gets as far
    as the first check of its arguments (a --resume checkpoint that does not exist)."""
    res = clone_cli_runs['resume']
    assert res.returncode != 0 and 'Traceback' not in res.stderr, res.stderr[-3000:]
    assert res.stderr.strip().splitlines()[-1] == (
        'MissingCheckpointError: --resume missing.pth: no such checkpoint (to resume from the '
        'latest checkpoint of the work dir, pass --resume without a path)'), res.stderr[-3000:]


def test_the_imported_package_answers_for_mmposenc_bases(clone):
    """``mmposenc::`` bases are looked up in the imported package: where another copy (here
    the clone's, loaded from its file as the startup hook does) registered first, importing
    this one re-points mmengine to it; a source checkout without .mim answers from its
    configs/, an installed package (with .mim) is left to mmengine."""
    import importlib.util

    from mmengine.config import config as config_module

    from mmposenc.utils import config_package
    saved = {name: getattr(config_module, name) for name in (
        'get_installed_path', '_get_external_cfg_path', '_get_external_cfg_base_path')}
    spec = importlib.util.spec_from_file_location(
        '_other_config_package', osp.join(clone, 'mmposenc', 'utils', 'config_package.py'))
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    try:
        config_module.get_installed_path = saved['get_installed_path'].__wrapped__
        other.register_config_package()
        assert config_module.get_installed_path('mmposenc') == osp.join(clone, 'mmposenc')
        config_package.register_config_package()
        assert config_module.get_installed_path('mmposenc') == config_package.PACKAGE_DIR
        assert config_module.get_installed_path.__wrapped__ is \
            saved['get_installed_path'].__wrapped__  # not a chain of wrappers
    finally:
        for name, value in saved.items():
            setattr(config_module, name, value)
    assert config_package.source_checkout_root(osp.join(clone, 'mmposenc')) == clone
    assert config_package.source_checkout_root(config_package.PACKAGE_DIR) is None  # .mim
    lookup = config_module._get_external_cfg_base_path
    assert lookup(osp.join(clone, 'mmposenc'), SMOKE) == osp.join(clone, 'configs', SMOKE)


@pytest.mark.slow
def test_clone_trains_a_user_config_from_the_users_folder(coco128_root, clone_cli_runs):
    """A clone that was never installed trains a user config with an ``mmposenc::`` base of
    the clone, importing the clone's mmposenc, into the user's relative --work-dir."""
    res, folder, clone = (clone_cli_runs['train'], clone_cli_runs['folders']['train'],
                          clone_cli_runs['clone'])
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert osp.isfile(folder / 'work' / 'iter_1.pth')
    dumped = (folder / 'work' / 'my_config.py').read_text()
    assert f"mmposenc_file = '{osp.join(clone, 'mmposenc', '__init__.py')}'" in dumped


# ---------------------------------------------------------------------- the user's folders
def _call_name(node):
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', '')


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


#: Tools whose job is to write the repository's own tracked files
REPOSITORY_TOOLS = {'misc/sync_metafiles.py': 'regenerates configs/*/metafile.yml from the '
                    'READMEs of the checkout (--root)'}


@pytest.mark.parametrize('tool', [t for t in _tool_files() if t not in REPOSITORY_TOOLS])
def test_tool_keeps_to_the_users_paths(tool):
    """No tool changes directory, runs a process in the repository, or has a default output
    or input path in the repository (``REPO``/``HERE``-based or under the tracked docs/):
    relative paths are the user's, relative to the working directory."""
    path = osp.join(TOOLS_DIR, tool)
    tree = ast.parse(open(path).read(), path)
    # names bound to a folder of the repository: REPO = osp.dirname(... __file__)
    repo_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and '__file__' in _names(node.value):
            repo_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    faults = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == 'chdir':
            faults.append(f'line {node.lineno}: os.chdir')
        for kw in node.keywords:
            if kw.arg == 'cwd' and _names(kw.value) & repo_names:
                faults.append(f'line {node.lineno}: a process run in the repository')
            if name == 'add_argument' and kw.arg == 'default':
                if _names(kw.value) & repo_names:
                    faults.append(f'line {node.lineno}: a default path in the repository')
                consts = [c.value for c in ast.walk(kw.value) if isinstance(c, ast.Constant)]
                if any(isinstance(c, str) and c.startswith('docs') for c in consts):
                    faults.append(f'line {node.lineno}: a default output in the tracked docs/')
    assert not faults, f'tools/{tool}: {faults}'


def test_benchmark_table_is_printed_not_written_without_out(clone_cli_runs):
    """``run_all.py`` without ``--out`` leaves the tracked docs/benchmarks.md (here the
    clone's) and the working directory as they were; ``--out`` is relative to the latter."""
    tracked, before = clone_cli_runs['tracked']
    folders = clone_cli_runs['folders']
    res = clone_cli_runs['table']
    assert res.returncode == 0, res.stderr[-3000:]
    assert '| benchmark | ours (ms) |' in res.stdout
    assert os.listdir(folders['table']) == []
    res = clone_cli_runs['out']
    assert res.returncode == 0, res.stderr[-3000:]
    assert '| benchmark | ours (ms) |' in (folders['out'] / 'bench' / 'table.md').read_text()
    assert open(tracked).read() == before


def _demo_module():
    return load_tool('demo.py', 'mmposenc_tools_demo')


def test_demo_reads_and_writes_relative_to_the_working_directory(tmp_path, monkeypatch):
    """tools/demo.py stays in the user's directory: a relative --work-dir and --data-root are
    the user's, given to the training processes as such, and the generated shapes_coco lands
    in the user's data/."""
    demo = _demo_module()
    monkeypatch.chdir(tmp_path)
    seen = {}

    def run_all(args, data_root, encodings):
        seen.update(cwd=os.getcwd(), work_dir=args.work_dir, data_root=data_root,
                    argv=demo.worker_argv(args))
        raise KeyboardInterrupt  # stop before training

    monkeypatch.setattr(demo, 'run_all', run_all)
    with pytest.raises(KeyboardInterrupt):
        demo.main(['--quick', '--work-dir', 'runs/demo'])
    assert seen['cwd'] == str(tmp_path) and os.getcwd() == str(tmp_path)
    assert seen['work_dir'] == str(tmp_path / 'runs' / 'demo')
    assert seen['data_root'] == str(tmp_path / 'data' / 'shapes_coco_demo_quick')
    assert osp.isfile(tmp_path / 'data' / 'shapes_coco_demo_quick' / 'annotations' /
                      'instances_val.json')
    (tmp_path / 'coco').mkdir()
    with pytest.raises(KeyboardInterrupt):
        demo.main(['--data-root', 'coco', '--work-dir', 'out'])
    assert seen['data_root'] == str(tmp_path / 'coco')
    argv = seen['argv']
    assert argv[argv.index('--data-root') + 1] == str(tmp_path / 'coco')


def test_demo_quick_on_a_coco_tree_takes_a_few_annotated_images(coco128_root, tmp_path):
    """--quick with --data-root: annotation files of the first 16 / 8 annotated images (in the
    work dir), every annotation of those images and no other; categories as in the tree."""
    demo = _demo_module()
    args = demo.parse_args(['--quick', '--data-root', coco128_root, '--work-dir',
                            str(tmp_path / 'work'), '--val-ann',
                            'annotations/instances_train2017.json', '--val-img', 'train2017/'])
    train, val = demo.prepare_quick_subset(args)
    assert osp.dirname(train) == str(tmp_path / 'work' / 'quick_data')
    full = json.load(open(osp.join(coco128_root, 'annotations', 'instances_train2017.json')))
    for path, n in ((train, 16), (val, 8)):
        sub = json.load(open(path))
        ids = [img['id'] for img in sub['images']]
        assert len(ids) == n and ids == sorted(ids)
        assert sub['categories'] == full['categories']
        assert sub['annotations'] == [a for a in full['annotations'] if a['image_id'] in ids]
        assert {a['image_id'] for a in sub['annotations']} == set(ids)
    cfg = demo.build_cfg('peg', demo.parse_args(
        ['--quick', '--data-root', coco128_root, '--train-ann', train, '--val-ann', val,
         '--val-img', 'train2017/']), coco128_root)
    assert cfg.train_dataloader.dataset.ann_file == train
    assert cfg.val_dataloader.dataset.ann_file == val and cfg.val_evaluator.ann_file == val


def test_demo_quick_on_coco128_from_the_users_folder(coco128_root, tmp_path, monkeypatch):
    """``tools/demo.py --quick --only peg --data-root coco`` from the user's folder (``coco``:
    a relative path there): the worker process it starts, given the arguments main() gives
    it, trains and evaluates on 16 / 8 images of the tree (its Runner's datasets, built here
    as the worker builds them). The run itself, from the user's folder into a relative
    --work-dir (demo.png there): test_detection_demo.py, on shapes_coco."""
    from mmengine.registry import DATASETS, init_default_scope
    demo = _demo_module()
    os.symlink(coco128_root, tmp_path / 'coco')
    monkeypatch.chdir(tmp_path)
    seen = {}

    def run_all(args, data_root, encodings):
        seen.update(data_root=data_root, encodings=encodings, argv=demo.worker_argv(args))
        raise KeyboardInterrupt  # the workers' arguments are all this test needs

    monkeypatch.setattr(demo, 'run_all', run_all)
    with pytest.raises(KeyboardInterrupt):
        demo.main(['--quick', '--only', 'peg', '--data-root', 'coco', '--val-ann',
                   'annotations/instances_train2017.json', '--val-img', 'train2017/',
                   '--work-dir', 'runs'])
    assert seen['encodings'] == ['peg'] and seen['data_root'] == str(tmp_path / 'coco')
    # the worker's command line, as run_all starts it
    args = demo.parse_args([*seen['argv'], '--worker', 'peg', '--data-dir', seen['data_root'],
                            '--work-dir', str(tmp_path / 'runs')])
    cfg = demo.build_cfg(args.worker, args, args.data_dir)
    init_default_scope('mmdet')
    train = DATASETS.build(cfg.train_dataloader.dataset)
    val = DATASETS.build(cfg.val_dataloader.dataset)
    assert (len(train), len(val)) == (16, 8)
    assert osp.dirname(cfg.val_evaluator.ann_file) == str(tmp_path / 'runs' / 'quick_data')


# ------------------------------------------------------------------------------ --resume
def _train_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location('mmposenc_tools_train',
                                                  osp.join(TOOLS_DIR, 'train.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resume_decides_before_the_runner(tmp_path):
    """--resume without a path: with nothing in the work dir, a fresh run and the line that
    says so (the config's load_from kept); with a last_checkpoint, resume from it; one that
    names a missing file, and --resume PATH of a missing file, are refused."""
    from mmengine.config import Config
    tool = _train_tool()
    work = tmp_path / 'work'
    cfg = Config(dict(work_dir=str(work), load_from=None))
    notice = tool.apply_resume(cfg, 'auto')
    assert notice == (f'--resume: nothing to resume in {work} (no last_checkpoint), '
                      'training from scratch')
    assert cfg.resume is False and cfg.load_from is None
    cfg = Config(dict(work_dir=str(work), load_from='detector.pth'))
    assert tool.apply_resume(cfg, 'auto').endswith('training from load_from=detector.pth')
    assert cfg.resume is False and cfg.load_from == 'detector.pth'
    work.mkdir()
    (work / 'last_checkpoint').write_text(str(work / 'iter_4.pth'))
    with pytest.raises(tool.MissingCheckpointError, match='names .*iter_4.pth, which does not'):
        tool.apply_resume(Config(dict(work_dir=str(work))), 'auto')
    import torch
    torch.save({'state_dict': {}}, work / 'iter_4.pth')
    cfg = Config(dict(work_dir=str(work), load_from='detector.pth'))
    assert tool.apply_resume(cfg, 'auto') is None
    assert cfg.resume is True and cfg.load_from is None
    with pytest.raises(tool.MissingCheckpointError, match='no such checkpoint'):
        tool.apply_resume(Config(dict(work_dir=str(work))), str(tmp_path / 'nope.pth'))
    cfg = Config(dict(work_dir=str(work)))
    assert tool.apply_resume(cfg, str(work / 'iter_4.pth')) is None
    assert cfg.resume is True and cfg.load_from == str(work / 'iter_4.pth')


# ------------------------------------------- every tool that takes a config: mmposenc:: bases
#: (tool, a shipped config it applies to, its other arguments; CKPT: a checkpoint file)
CONFIG_TOOLS = [
    ('train.py', SMOKE, []),
    ('test.py', SMOKE, ['CKPT']),
    ('analysis/resolution_sweep.py', 'cpvt/cpvt-tiny_4xb256_in1k.py', ['CKPT']),
    ('analysis/pervit_detection_memory.py', 'pervit/retinanet_pervit-t_fpn_1x_coco.py',
     ['--iters', '1']),
    ('analysis/visualize_attention.py', 'cpvt/cpvt-tiny_4xb256_in1k.py', ['--img', 'x.jpg']),
    ('analysis/pervit_analysis.py', 'pervit/pervit-tiny_8xb128_in1k.py', []),
    ('deployment/pytorch2onnx.py', 'peg_detr/detr-peg_r50_16xb2-50e_coco.py',
     ['--shape', '64', '64']),
]


@pytest.fixture(scope='module')
def config_tools_parsed(tmp_path_factory):
    """Each tool of CONFIG_TOOLS on a user config with an ``mmposenc::`` base of the shipped
    config it applies to, with the startup hook off, each a fresh process forked from one
    interpreter that imported torch and mmengine, not mmposenc (tests/forked_runs.py); the
    config stops the tool once it has been parsed. {tool: (exit status, stdout, stderr)}."""
    import torch
    folder = tmp_path_factory.mktemp('config_tools')
    torch.save({'state_dict': {}}, folder / 'ckpt.pth')
    runs = []
    for tool, base, args in CONFIG_TOOLS:
        sub = folder / tool.replace('/', '_')
        sub.mkdir()
        config = _user_config(sub, f'mmposenc::{base}', "print('parsed, mmposenc from', "
                              "mmposenc_file)\nraise SystemExit(0)\n")
        args = [str(folder / 'ckpt.pth') if a == 'CKPT' else a for a in args]
        runs.append([osp.join(TOOLS_DIR, tool)] + (
            ['--config', config] if tool == 'analysis/pervit_detection_memory.py' else [config])
            + args)
    env = dict(os.environ, MMPOSENC_NO_STARTUP_HOOK='1')
    done = run_tools([dict(argv=argv, cwd=str(folder)) for argv in runs], env=env)
    return {tool: (res.returncode, res.stdout, res.stderr)
            for (tool, _, _), res in zip(CONFIG_TOOLS, done)}


@pytest.mark.parametrize('tool', [t[0] for t in CONFIG_TOOLS])
def test_config_tools_parse_an_mmposenc_base_without_the_startup_hook(tool,
                                                                      config_tools_parsed):
    """Each tool that takes a config imports mmposenc before parsing it, so a user config
    with an ``mmposenc::`` base parses also with the startup hook off (before,
    resolution_sweep and pervit_detection_memory failed: 'mmengine does not support to load
    mmposenc config'). The config stops the tool once it has been parsed."""
    code, stdout, stderr = config_tools_parsed[tool]
    assert code == 0, stdout[-2000:] + stderr[-3000:]
    assert f"parsed, mmposenc from {osp.join(REPO_ROOT, 'mmposenc', '__init__.py')}" in stdout
