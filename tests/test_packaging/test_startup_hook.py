"""mmposenc as users run it from their own folder: the startup hook, the wheel, mim.

The startup hook: `_base_ = 'mmposenc::...'` through the hosts' own entry points. mmposenc
installs ``mmposenc-startup.pth`` into site-packages (regular and editable installs); at
interpreter start it puts one finder in front of ``sys.meta_path``, which registers mmposenc
with mmengine's config loader when ``mmengine.config`` is imported (``_mmposenc_startup.py``).
Every run here is a fresh Python process that never imports mmposenc itself: ``mim train
mmposenc`` starts one per install; the hosts' train.py, test.py and inferencers, the hook-off
runs and our tools/test.py are forked children of one fresh interpreter per install and hook
state, each starting with nothing of mmposenc imported (asserted; see ``_fresh_children`` and
tests/forked_runs.py). Tested:

- what the hook costs: the modules an interpreter imports at startup (one more: the hook),
  nothing imported when it registers (no mmposenc, no torch), the finder gone afterwards, the
  off switch ``MMPOSENC_NO_STARTUP_HOOK=1``; timings: tools/benchmark/startup_hook_cost.py;
- that the editable wheel (``pip install -e .``, as tools/setup_env.sh installs) and the regular
  wheel both install it, and that a half-uninstalled or broken hook never breaks Python;
- a user config in a folder outside the repository with an ``mmposenc::`` base, through
  mmdet's / mmseg's / mmpretrain's ``tools/train.py`` and ``tools/test.py`` (as shipped in
  their wheels, ``<host>/.mim/tools``; ``mim train <host>`` runs that train.py as ``mim train
  mmposenc`` runs ours), and ``DetInferencer``, ``MMSegInferencer`` and
  ``ImageClassificationInferencer`` on one real image, with the editable install (this
  virtual environment) and with the wheel in a throwaway environment;
- without the hook: the hosts' train.py refuse such a config, ``custom_imports`` does not
  help, our tools/train.py's loader (it imports mmposenc first) and a base by path do;
- mmposenc's own tools (the README's "use from your own project" rows): the wheel (its
  contents, its package and metadata, ``mim search`` and ``mim train mmposenc``) in a fresh
  virtual environment, and with the editable install ``PYTHONPATH=<repo> mim train mmposenc``
  (up to the built model) and our tools/test.py on the user's PEG-DETR.
"""
import json
import os
import os.path as osp
import re
import shutil
import sys
import tempfile
import zipfile

import pytest
from test_package_install import (QUIET, VENV_SITE, _assert_mim_sees_the_repository, _env,
                                  _model_names, _run)

from conftest import REPO_ROOT
from forked_runs import run_tools

# under pytest-xdist (make test) on one worker: the module's project, trainings, wheel and
# fresh interpreters are made once
pytestmark = pytest.mark.xdist_group('wheel_environment')

PTH = 'mmposenc-startup.pth'
HOOK = '_mmposenc_startup'
#: the hook's copy of mmposenc/ops/ext_finder.py (mmcv._ext where mmcv has no compiled ops)
EXT_FINDER = '_mmposenc_ext_finder'
OFF = 'MMPOSENC_NO_STARTUP_HOOK'
OPS_OFF = 'MMPOSENC_NO_TORCH_OPS'
REFUSED = 'AssertionError: mmengine does not support to load mmposenc config.'


def _py(args, python=sys.executable, cwd=None, off=False, check=True, **extra):
    """``python -W ignore args`` in a fresh process, no PYTHONPATH, by default in an empty
    folder (``-c`` puts the working directory first on sys.path: in the repository its
    mmposenc would shadow the install under test); ``off`` sets both switches (the
    registration's and the PyTorch kernels'): no hook at all."""
    env = _env(**extra)
    env.pop(OFF, None)
    env.pop(OPS_OFF, None)
    if off:
        env[OFF] = env[OPS_OFF] = '1'
    if cwd is None:
        with tempfile.TemporaryDirectory() as empty:
            return _run([python, *QUIET, *args], cwd=empty, env=env, check=check)
    return _run([python, *QUIET, *args], cwd=cwd, env=env, check=check)


def _editable_python():
    """This virtual environment's interpreter, after checking that its editable mmposenc was
    installed with the hook (an install older than the hook lacks the .pth)."""
    if not osp.isfile(osp.join(VENV_SITE, PTH)):
        pytest.fail(f'{osp.join(VENV_SITE, PTH)} is missing: mmposenc was installed without '
                    'its startup hook; run tools/setup_env.sh (it reinstalls mmposenc)')
    return sys.executable


# ------------------------------------------------------------------ the editable wheel -------
def test_the_editable_wheel_holds_the_startup_hook(tmp_path):
    """setuptools' PEP 660 build (what `pip install -e .` runs): the wheel holds our .pth at
    its root, byte for byte, beside setuptools' own finder, which maps the hook module to the
    source tree."""
    src = str(tmp_path / 'src')
    _copy_source(src)
    code = ('import sys; from setuptools import build_meta\n'
            'print(build_meta.build_editable(sys.argv[1]))')
    name = _run([sys.executable, *QUIET, '-c', code, str(tmp_path / 'dist')],
                cwd=src).stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(str(tmp_path / 'dist' / name)) as wheel:
        names = wheel.namelist()
        assert PTH in names, names
        assert wheel.read(PTH) == open(osp.join(REPO_ROOT, PTH), 'rb').read()
        finder, = [n for n in names if n.startswith('__editable__') and n.endswith('finder.py')]
        mapping = wheel.read(finder).decode()
    assert f"'{HOOK}': '{osp.join(src, HOOK)}'" in mapping, mapping


# ------------------------------------------------------------------ startup and cost ---------
STARTUP = """\
import json, sys
print(json.dumps(dict(modules=sorted(sys.modules),
                      finders=[type(f).__name__ for f in sys.meta_path],
                      hook=getattr(sys.modules.get('_mmposenc_startup'), '__file__', None))))
"""


AFTER_MMENGINE = """\
before = set(sys.modules)
import mmengine.config
from mmengine.config import config
from mmengine.config.utils import MODULE2PACKAGE
module = sys.modules['mmengine.config']
print(json.dumps(dict(
    registered=MODULE2PACKAGE.get('mmposenc'),
    folder=config.get_installed_path('mmposenc') if 'mmposenc' in MODULE2PACKAGE else None,
    mmdet=config.get_installed_path('mmdet'),
    new=sorted(set(sys.modules) - before),
    loader=type(module.__loader__).__name__,
    spec_loader_is_loader=module.__spec__.loader is module.__loader__,
    finders=[type(f).__name__ for f in sys.meta_path])))
"""
USER_CONFIG = """\
# a user's own config, outside the repository
_base_ = 'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py'
model = dict(peg_after=(0, 1))
"""
PARSE = """\
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1], import_custom_modules=False)
print(cfg.model.type, cfg.model.peg_after, 'mmposenc' in sys.modules)
"""


@pytest.fixture(scope='module')
def states(request, tmp_path_factory):
    """What one fresh `python -c` of an install, with the hook on or off, prints: its state at
    startup (``STARTUP``), what `import mmengine.config` then imported and registered
    (``AFTER_MMENGINE``) and its parse of a user config with an `mmposenc::` base (``PARSE``,
    ``USER_CONFIG``; mmengine refuses it with the hook off: the process fails there), from a
    folder holding only that config; a function of (install, hook on?) giving dict(startup,
    after, parse, res)."""
    folder = tmp_path_factory.mktemp('states')
    (folder / 'user.py').write_text(USER_CONFIG)
    made = {}

    def get(install, on):
        if (install, on) not in made:
            res = _py(['-c', STARTUP + AFTER_MMENGINE + PARSE, 'user.py'],
                      python=_python(request, install), cwd=str(folder), off=not on, check=on)
            lines = res.stdout.split('\n')
            assert len(lines) > 2, res.stdout + res.stderr[-3000:]
            made[install, on] = dict(startup=json.loads(lines[0]), after=json.loads(lines[1]),
                                     parse=lines[2], res=res)
        return made[install, on]

    return get


def test_at_startup_the_hook_imports_itself_only(states):
    """With the hook, `python -c ...` imports two modules more than without (the hook's own,
    from the source tree for the editable install, and its copy of mmposenc's ext finder),
    puts three finders first (mmengine.config's, mim's and mmcv.ops') and one last (mmcv._ext
    where no compiled one is found); nothing of mmengine, torch or mmposenc. The off switch
    leaves the interpreter as without the hook."""
    on, off = states('editable', True)['startup'], states('editable', False)['startup']
    assert set(on['modules']) - set(off['modules']) == {HOOK, EXT_FINDER}
    assert set(off['modules']) <= set(on['modules'])
    assert not [m for m in on['modules'] if m.split('.')[0] in ('mmengine', 'torch', 'mmposenc')]
    assert on['finders'] == (['MMEngineConfigFinder', 'MimFinder', 'MMCVOpsWatcher']
                             + off['finders'] + ['TorchExtFinder'])
    assert on['hook'] == osp.join(REPO_ROOT, HOOK + '.py') and off['hook'] is None


def test_importing_mmengine_config_registers_mmposenc(states):
    """`import mmengine.config` registers `mmposenc` (the package folder of the editable
    install: the source tree) and imports only the hook's copy of config_package.py beyond
    what mmengine imports without the hook; mmengine.config keeps its own loader, and the
    finder takes itself out (later imports do not pass through it)."""
    on, off = states('editable', True)['after'], states('editable', False)['after']
    assert on['registered'] == 'mmposenc' and off['registered'] is None
    assert on['folder'] == osp.join(REPO_ROOT, 'mmposenc')
    assert on['mmdet'] == off['mmdet']
    assert set(on['new']) - set(off['new']) == {'_mmposenc_config_package'}
    assert not [m for m in on['new'] if m.split('.')[0] in ('mmposenc', 'torch')]
    assert on['loader'] == off['loader'] == 'SourceFileLoader'
    assert on['spec_loader_is_loader']
    assert 'MMEngineConfigFinder' not in on['finders']
    # (mim's finder waits for mim: tests/test_packaging/test_mim_editable.py)
    assert on['finders'] == ['MimFinder', 'MMCVOpsWatcher'] + off['finders'] + ['TorchExtFinder']


def test_user_config_parses_without_importing_mmposenc_and_the_off_switch(states):
    """A user config with an `mmposenc::` base parses in a fresh process that never imports
    mmposenc (the package stays unimported); with MMPOSENC_NO_STARTUP_HOOK=1 mmengine refuses
    it as it does without the hook."""
    on, off = states('editable', True), states('editable', False)
    assert on['parse'] == 'mmposenc.PEGDETR (0, 1) False', on['res'].stdout
    assert off['res'].returncode != 0 and REFUSED in off['res'].stderr, (
        off['res'].stderr[-2000:])


# ------------------------------------------------------------------ robustness ---------------
# Python's `site` runs the .pth of a site folder in addsitedir; here the folder holds the .pth
# and what is left of an install. -S: no other site folder; this venv's site-packages is added
# as a plain path (its .pth files, the editable mmposenc's finder among them, do not run).
ADDSITE = """\
import site, sys, warnings
sys.path.append({venv_site!r})
site.addsitedir(sys.argv[1])
warnings.simplefilter('always')
with warnings.catch_warnings(record=True) as caught:
    import mmengine.config
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.config import config
print('hook' if '_mmposenc_startup' in sys.modules else 'no hook',
      config.get_installed_path('mmposenc') if 'mmposenc' in MODULE2PACKAGE else 'unregistered',
      'mmposenc imported' if 'mmposenc' in sys.modules else 'mmposenc not imported')
print([str(w.message) for w in caught if 'mmposenc' in str(w.message)])
"""
BROKEN = {
    # what is in the site folder besides the .pth
    'module gone': {},
    'module broken': {HOOK + '.py': 'def install(:\n'},
    'package gone': {HOOK + '.py': None},
    'package present': {HOOK + '.py': None,
                        'mmposenc/__init__.py': 'raise ImportError("the hook imported me")\n',
                        'mmposenc/utils/config_package.py': None},
    'config_package broken': {HOOK + '.py': None,
                              'mmposenc/__init__.py': '',
                              'mmposenc/utils/config_package.py': 'raise OSError("half gone")\n'},
}


@pytest.mark.parametrize('case', list(BROKEN))
def test_a_half_uninstalled_hook_never_breaks_python(tmp_path, case):
    """The .pth left behind without its module, a broken module, mmposenc uninstalled: Python
    starts and imports mmengine.config silently. With mmposenc's files there the hook
    registers them without importing the package; when their registration raises, mmengine
    still loads and one warning says what failed and how to turn the hook off."""
    site_dir = tmp_path / 'site'
    site_dir.mkdir()
    shutil.copy(osp.join(REPO_ROOT, PTH), site_dir)
    for rel, text in BROKEN[case].items():
        path = site_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copy(osp.join(REPO_ROOT, rel), path)
        else:
            path.write_text(text)
    res = _run([sys.executable, '-S', *QUIET, '-c', ADDSITE.format(venv_site=VENV_SITE),
                str(site_dir)], cwd=str(tmp_path))
    state, warned = res.stdout.strip().split('\n')
    assert 'Error processing line' not in res.stderr and 'Traceback' not in res.stderr
    expected = {
        'module gone': 'no hook unregistered mmposenc not imported',
        'module broken': 'no hook unregistered mmposenc not imported',
        'package gone': 'hook unregistered mmposenc not imported',
        'package present': f'hook {site_dir / "mmposenc"} mmposenc not imported',
        'config_package broken': 'hook unregistered mmposenc not imported',
    }[case]
    assert state == expected
    if case == 'config_package broken':
        assert 'OSError: half gone' in warned and f'{OFF}=1' in warned, warned
    else:
        assert warned == '[]'


# ------------------------------------------------------------------ the hosts' entry points --
# A user's project folder outside the repository: one config per task, each a shipped config
# of ours taken through `mmposenc::`, with the user's data and a 1-iteration schedule (the
# smallest shipped config of each kind; only data, schedule and no-download overrides, and
# checkpoints without the optimizer's state; the hosts' test.py evaluates one image: what is
# tested is the entry point, not the metric).
_SCHEDULE = """
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1)
val_dataloader = val_evaluator = val_cfg = None
param_scheduler = []
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=1, save_optimizer=False),
                     logger=dict(interval=1))
log_processor = dict(by_epoch=False)
"""
_LOADER = 'batch_size={bs}, num_workers=0, persistent_workers=False'
TASKS = {
    # DETR-R18 made tiny (our smoke config, mmdet's DETR) with the user's switch to a PEG
    'detection': dict(host='mmdet', image='coco', ours='encoder.pegs.', config="""\
_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)
model = dict(type='mmposenc.PEGDETR', encoder_pos='peg')
data_root = {coco!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = dict(dataset=dict(data_root=data_root, indices=1))
test_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
""" + _SCHEDULE, metric='coco/bbox_mAP'),
    'instance': dict(host='mmdet', image='coco', ours='backbone.pegs.', config="""\
_base_ = 'mmposenc::pvt_peg/mask-rcnn_pvt-peg-t_fpn_1x_coco.py'
model = dict(backbone=dict(init_cfg=None))  # no ImageNet checkpoint here
data_root = {coco!r}
_data = dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
             data_prefix=dict(img='train2017/'), indices=2)
# trained at the images' own size (COCO128: 640 x 480), tested with the shipped pipeline
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=(640, 480), keep_ratio=True),
    dict(type='PackDetInputs'),
]
train_dataloader = dict(%s, dataset=dict(pipeline=train_pipeline, **_data))
test_dataloader = dict(%s, dataset=dict(_data, indices=1))
test_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
""" % (_LOADER.format(bs=1), _LOADER.format(bs=1)) + _SCHEDULE, metric='coco/segm_mAP'),
    'semantic': dict(host='mmseg', image='ade', ours='backbone.pegs.', config="""\
_base_ = 'mmposenc::pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py'
model = dict(backbone=dict(init_cfg=None))  # no ImageNet checkpoint here
data_root = {ade!r}
_data = dict(data_root=data_root,
             data_prefix=dict(img_path='images', seg_map_path='annotations'))
train_dataloader = dict(%s, dataset=_data)
test_dataloader = dict(%s, dataset=dict(_data, indices=1))
""" % (_LOADER.format(bs=1), _LOADER.format(bs=1)) + _SCHEDULE, metric='mIoU'),
    # CPVT-Ti on the user's own class folders (COCO128 object crops, 3 classes)
    'classification': dict(host='mmpretrain', image='coco', ours='backbone.pegs.', config="""\
_base_ = 'mmposenc::cpvt/cpvt-tiny_4xb256_in1k.py'
model = dict(head=dict(num_classes=3))
data_preprocessor = dict(num_classes=3)  # Mixup / CutMix targets
data_root = {crops!r}
train_dataloader = dict(%s, sampler=dict(_delete_=True, type='DefaultSampler', shuffle=True),
                        dataset=dict(_delete_=True, type='CustomDataset', data_root=data_root,
                                     data_prefix='train', pipeline={{{{_base_.train_pipeline}}}}))
test_dataloader = dict(%s, dataset=dict(
    _delete_=True, type='CustomDataset', data_root=data_root, data_prefix='val', indices=1,
    pipeline={{{{_base_.test_pipeline}}}}))
test_evaluator = dict(type='Accuracy', topk=(1, ))
""" % (_LOADER.format(bs=4), _LOADER.format(bs=4)) + _SCHEDULE, metric='accuracy/top1'),
}
HOST_OF = {'mmdet': 'detection', 'mmseg': 'semantic', 'mmpretrain': 'classification'}


def _host_tool(host, name):
    """``<host>/.mim/tools/<name>``, as the host's wheel ships it (located without import)."""
    import importlib.util
    path = osp.join(osp.dirname(importlib.util.find_spec(host).origin), '.mim', 'tools', name)
    assert osp.isfile(path), path
    return path


# The user's PEG-DETR (the detection task's config) is what `mim train mmposenc` (our
# tools/train.py from mmposenc/.mim/tools) trains; the hosts' test.py / DetInferencer with the
# wheel and our tools/test.py with the editable install evaluate that run's checkpoint.
OURS = 'detection.py'


@pytest.fixture(scope='module')
def project(tmp_path_factory, coco128_root, ade20k_sample_root):
    """The user's folder with one config per task (the classification data: COCO128 object
    crops in class folders, made with tools/dataset_converters/coco_crops_cls.py; the detection
    one, the user's PEG-DETR, is also the config of `mim train mmposenc`: ``OURS``), and the
    configs the parses without the hook read (``user.py``: ``USER_CONFIG``; the same with
    ``custom_imports`` of mmposenc; the same inheriting our config by its path)."""
    import importlib.util
    folder = tmp_path_factory.mktemp('my_project')
    spec = importlib.util.spec_from_file_location(
        'coco_crops_cls', osp.join(REPO_ROOT, 'tools', 'dataset_converters', 'coco_crops_cls.py'))
    crops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crops)
    stats = crops.convert(coco128_root, str(folder / 'crops'), num_classes=3, min_size=32,
                          max_size=96, max_per_class=12)
    assert stats['train'] > 0 and stats['val'] > 0
    roots = dict(coco=coco128_root.rstrip('/') + '/',
                 ade=osp.join(ade20k_sample_root, 'sampleData') + '/',
                 crops=str(folder / 'crops'))
    for task, spec in TASKS.items():
        (folder / f'{task}.py').write_text(spec['config'].format(**roots))
    (folder / 'user.py').write_text(USER_CONFIG)
    (folder / 'user_custom_imports.py').write_text(
        USER_CONFIG + "custom_imports = dict(imports=['mmposenc'], allow_failed_imports=False)\n")
    (folder / 'by_path.py').write_text(USER_CONFIG.replace(
        'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py',
        osp.join(REPO_ROOT, 'configs', 'peg_detr', 'detr-peg_r50_16xb2-50e_coco.py')))
    images = dict(coco=osp.join(roots['coco'], 'train2017', '000000000009.jpg'),
                  ade=osp.join(roots['ade'], 'images', 'ADE_val_00000001.jpg'))
    return dict(folder=str(folder), images=images)


def _load(path):
    """A checkpoint's dict, its tensors mapped from the file (only what a test reads is read)."""
    import torch
    return torch.load(path, map_location='cpu', weights_only=False, mmap=True)


def _assert_checkpoint(path, task):
    state = _load(path)
    assert state['meta']['iter'] == 1
    ours = [k for k in state['state_dict'] if k.startswith(TASKS[task]['ours'])]
    assert ours, f'{path} holds no {TASKS[task]["ours"]}* weights: not our model'


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


@pytest.fixture(scope='module')
def wheel_environment(tmp_path_factory):
    """A throwaway environment with mmposenc installed from its wheel: a copy of the source
    (``src``), the wheel built from it by ``pip wheel`` (``wheel``), a fresh venv without pip or
    setuptools of its own holding the wheel alone (``python``, its ``site`` folder), and a .pth
    file that appends this venv's site-packages for the pinned stack (torch, mmcv, mmengine,
    the hosts, openmim). A plain path in a .pth file adds the folder without running its .pth
    files, so the editable mmposenc of this venv is not importable there."""
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
    return dict(src=src, wheel=wheel, python=py, site=site)


@pytest.fixture(scope='module')
def wheel_python(wheel_environment):
    """The interpreter of the wheel's environment (see ``wheel_environment``), after checking
    that the wheel holds the startup hook and installed it."""
    with zipfile.ZipFile(wheel_environment['wheel']) as z:
        assert z.read(PTH) == open(osp.join(REPO_ROOT, PTH), 'rb').read()
        assert HOOK + '.py' in z.namelist()
    site_dir = wheel_environment['site']
    assert osp.isfile(osp.join(site_dir, PTH)) and osp.isfile(osp.join(site_dir, HOOK + '.py'))
    return wheel_environment['python']


def _python(request, install):
    """The interpreter of an install: this environment (editable) or the wheel's."""
    if install == 'editable':
        return _editable_python()
    return request.getfixturevalue('wheel_python')


def _mmposenc_file(request, install):
    """Where ``import mmposenc`` comes from with ``install``: the source tree (editable) or
    the wheel's site-packages."""
    if install == 'editable':
        return osp.join(REPO_ROOT, 'mmposenc', '__init__.py')
    return osp.join(request.getfixturevalue('wheel_environment')['site'], 'mmposenc',
                    '__init__.py')


@pytest.mark.slow
def test_wheel_install_startup_and_registration(wheel_environment, states):
    """The regular wheel: at startup the hook alone is imported (from the wheel's
    site-packages), `import mmengine.config` registers the wheel's package folder, and the
    off switch leaves both as without the hook."""
    site_dir = wheel_environment['site']
    on, off = states('wheel', True), states('wheel', False)
    assert set(on['startup']['modules']) - set(off['startup']['modules']) == {HOOK, EXT_FINDER}
    assert on['startup']['hook'] == osp.join(site_dir, HOOK + '.py')
    assert on['after']['folder'] == osp.join(site_dir, 'mmposenc')
    assert not [m for m in on['after']['new'] if m.split('.')[0] in ('mmposenc', 'torch')]
    assert off['after']['registered'] is None


# ------------------------------------------------------------------ mim train ---------------
# `mim train mmposenc` runs our tools/train.py from mmposenc/.mim/tools in a new process of the
# same interpreter (mim's command path, the same as for `mim train <host>`, which runs the
# host's .mim/tools/train.py): with the wheel it trains the user's PEG-DETR (``OURS``, one
# iteration; its checkpoint is what the hosts' test.py / DetInferencer with the wheel and our
# tools/test.py with the editable install evaluate); with the editable install (repository
# first on PYTHONPATH, as the README says) it runs until the Runner has built and initialized
# the user's model and entered the training loop (0 iterations: past that point the two
# installs run the same train.py). The hosts' own train.py run in forked children of fresh
# interpreters (``with_hook``).
MIM_TRAINS = {
    'wheel': [OURS],
    'editable': [OURS, '--cfg-options', 'train_cfg.max_iters=0'],
}


@pytest.fixture(scope='module')
def mim_trains(request, project):
    """``mim train mmposenc CONFIG --work-dir ...`` of ``MIM_TRAINS``, each made on first use
    from the user's folder: a function of the install giving (the completed mim process,
    work_dir)."""
    made = {}

    def get(install):
        if install not in made:
            config, *options = MIM_TRAINS[install]
            work_dir = osp.join(project['folder'], 'work_dirs', f'mim_mmposenc_{install}')
            extra = dict(PYTHONPATH=REPO_ROOT) if install == 'editable' else {}
            res = _py(['-m', 'mim', 'train', 'mmposenc', config, '--work-dir', work_dir,
                       *options], python=_python(request, install), cwd=project['folder'],
                      **extra)
            made[install] = res, work_dir
        return made[install]

    return get


@pytest.mark.slow
def test_mim_train(request, mim_trains):
    """`mim train mmposenc CONFIG` with the wheel: mim runs the wheel's .mim/tools/train.py
    in a new process of the same interpreter (the command it prints is checked), which trains
    the user's PEG-DETR (``OURS``: the checkpoint holds our PEG weights). `mim train <host>`
    runs the host's .mim/tools/train.py the same way; the hosts' train.py with the startup hook
    in fresh interpreters: ``test_host_train_script``."""
    res, work_dir = mim_trains('wheel')
    package = osp.join(request.getfixturevalue('wheel_environment')['site'], 'mmposenc')
    assert osp.join(package, '.mim', 'tools', 'train.py') in res.stdout, res.stdout[-3000:]
    _assert_checkpoint(osp.join(work_dir, 'iter_1.pth'), 'detection')


# ------------------------------------------------------------------ fresh interpreters ------
# The other checks of a user's entry points run in forked children of one fresh interpreter
# per install and hook state (tests/forked_runs.py): it imports the stack once (torch and what
# the runs import; nothing of mmposenc, asserted), with the startup hook on (its registration
# runs when that interpreter imports mmengine.config, as in any fresh interpreter) or off
# (``MMPOSENC_NO_STARTUP_HOOK=1``); each child starts from that state and runs one script as
# ``python <script> <args>`` runs it, or one snippet as ``python -c`` does, from the user's
# folder, no PYTHONPATH. Each child formats a config's text once, not at each of the Runner's
# 4-5 uses (memoized: the same text; tests/forked_runs.py), a cost that is not the point here.
def _fresh_children(python, jobs, preload, cwd, hook=True):
    """{name: (returncode, stdout + stderr)} of ``jobs`` ({name: dict(argv=...) or
    dict(code=..., argv=...)}), run in ``cwd`` as described above."""
    runs = [dict(job, cwd=cwd) for job in jobs.values()]
    done = run_tools(runs, preload=('torch', *preload), env=_env(), python=python,
                     options=QUIET, startup_hook=hook, memoize_formatting=True)
    return {name: (res.returncode, res.stdout + res.stderr) for name, res in zip(jobs, done)}


# ------------------------------------------------------------------ without the hook -------
# The parses of a user's config without the startup hook, from the user's folder: through our
# tools/train.py's loader (it imports mmposenc itself, first) and then with mmengine's Config
# after `import mmposenc` (what the loader does first); mmengine's Config as the hosts' tools
# call it, with custom_imports of mmposenc in the config, and on a config inheriting ours by
# its path. Each starts with mmposenc neither imported nor registered (asserted).
UNREGISTERED = """\
import sys
from mmengine.config import Config
from mmengine.config.utils import MODULE2PACKAGE
assert 'mmposenc' not in sys.modules and 'mmposenc' not in MODULE2PACKAGE
"""
PRINT_CFG = ("print(cfg.model.type, cfg.model.encoder_pos, cfg.model.peg_after, "
             "cfg.default_scope, cfg.custom_imports.imports)\n")
OUR_LOADER = UNREGISTERED + """\
from mmposenc.utils.tools.runner import load_config
cfg = load_config('user.py')
print(cfg.model.type, cfg.work_dir)
import mmposenc  # what the loader did first: then mmengine's Config parses it
cfg = Config.fromfile('user.py')
""" + PRINT_CFG
HOST_PARSE = UNREGISTERED + """\
try:
    Config.fromfile('user_custom_imports.py')
    print('parsed')
except Exception as err:
    print(f'{type(err).__name__}: {err}')
print('mmposenc' in sys.modules)
# inheriting our config by its path needs no import before parsing
cfg = Config.fromfile('by_path.py')
""" + PRINT_CFG


@pytest.fixture(scope='module')
def without_hook(project):
    """With the hook off (one fresh interpreter started with ``MMPOSENC_NO_STARTUP_HOOK=1``,
    forked children as above): each host's tools/train.py on the user config of its task
    (``refused <host>``), ``OUR_LOADER`` and ``HOST_PARSE``."""
    jobs = {f'refused {host}': dict(argv=[
        _host_tool(host, 'train.py'), f'{task}.py', '--work-dir',
        osp.join(project['folder'], 'work_dirs', f'refused_{host}')])
        for host, task in HOST_OF.items()}
    jobs.update(our_loader=dict(code=OUR_LOADER), host_parse=dict(code=HOST_PARSE))
    return _fresh_children(_editable_python(), jobs, ('mmcv.cnn', 'mmdet.models',
                                                      'mmengine.runner'),
                           project['folder'], hook=False)


@pytest.mark.slow
@pytest.mark.parametrize('host', list(HOST_OF))
def test_without_the_hook_the_host_train_script_refuses(without_hook, host):
    """The same user configs with the hook off: each host's tools/train.py stops at parsing
    with mmengine's refusal (what the hook fixes)."""
    returncode, output = without_hook[f'refused {host}']
    assert returncode != 0 and REFUSED in output, output[-2000:]


def test_user_config_inherits_an_mmposenc_config(without_hook):
    """Editable install, a config outside the repository parsed from a folder outside the repo
    (``OUR_LOADER``, hook off): through tools/train.py's loader (load_config imports mmposenc
    itself, first), and then with mmengine's Config after `import mmposenc` (what the loader
    does first)."""
    returncode, output = without_hook['our_loader']
    assert returncode == 0, output[-3000:]
    loader, plain = output.split('\n')[:2]
    assert loader.strip() == 'mmposenc.PEGDETR ./work_dirs/user', output
    assert plain == ("mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"), output


def test_without_the_startup_hook_mmposenc_must_be_imported_before_parsing(without_hook):
    """What the hosts' tools/train.py does (Config.fromfile first) with the startup hook
    turned off (``HOST_PARSE``): `custom_imports` in the config does not help, since mmengine
    resolves `_base_` before it imports them; inheriting our config by its path does."""
    returncode, output = without_hook['host_parse']
    assert returncode == 0, output[-3000:]
    refused, imported, loaded = output.split('\n')[:3]
    assert refused == REFUSED
    assert imported == 'False'
    assert loaded == "mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"


# ------------------------------------------------------------------ with the hook ----------
# The hosts' test.py and inferencers run once per task: with the editable install for instance
# segmentation, semantic segmentation and classification, with the wheel for detection (each
# install once at least); each host's own train.py runs once, in a forked child as below:
# mmdet's on the instance segmentation config with the editable install, mmseg's and
# mmpretrain's with the wheel (their checkpoints then tested with the editable install); the
# detection checkpoint is that of `mim train mmposenc` with the wheel (the same config): past
# the startup hook, which the two installs put in place differently (tested above), the paths
# are the same code. The semantic segmentation training takes 256 x 256 crops instead of the
# shipped 512 x 512 (one step of PVT-PEG-T FPN: what is tested is the entry point).
TRAIN_CASES = [('editable', 'instance'), ('wheel', 'semantic'), ('wheel', 'classification')]
TRAIN_OPTIONS = {'semantic': ['--cfg-options',
                              'train_dataloader.dataset.pipeline.3.crop_size=(256,256)',
                              'model.data_preprocessor.size=(256,256)']}
TEST_CASES = [('editable', 'instance'), ('editable', 'semantic'), ('editable', 'classification'),
              ('wheel', 'detection')]
INFER = {
    'detection': """\
from mmdet.apis import DetInferencer
inferencer = DetInferencer(model=CONFIG, weights=CHECKPOINT, device='cpu')
result = inferencer(IMAGE, out_dir=OUT)
pred = result['predictions'][0]  # labels, scores, bboxes (x1, y1, x2, y2 in image pixels)
""",
    'instance': """\
from mmdet.apis import DetInferencer
inferencer = DetInferencer(model=CONFIG, weights=CHECKPOINT, device='cpu')
result = inferencer(IMAGE, out_dir=OUT)
pred = result['predictions'][0]  # labels, scores, bboxes, masks (COCO RLE)
""",
    'semantic': """\
from mmseg.apis import MMSegInferencer
inferencer = MMSegInferencer(model=CONFIG, weights=CHECKPOINT, device='cpu')
result = inferencer(IMAGE, out_dir=OUT)
pred = result['predictions']  # (H, W) class indices
""",
    'classification': """\
from mmpretrain.apis import ImageClassificationInferencer
inferencer = ImageClassificationInferencer(model=CONFIG, pretrained=CHECKPOINT, device='cpu')
pred = inferencer(IMAGE)[0]  # pred_label, pred_score, pred_class, pred_scores
""",
}
# what the test reads off each prediction (printed as JSON by the fresh process)
REPORT = """
import json, sys
import numpy as np
from PIL import Image
width, height = Image.open(IMAGE).size
model = inferencer.model
out = dict(model=type(model).__module__,
           backbone=type(getattr(model, 'backbone', model)).__module__,
           mmposenc=sys.modules['mmposenc'].__file__, width=width, height=height)
if isinstance(pred, dict) and 'bboxes' in pred:
    out.update(n=len(pred['bboxes']), boxes=np.asarray(pred['bboxes']).tolist(),
               labels=pred['labels'], scores=pred['scores'])
    if 'masks' in pred:
        from pycocotools import mask as mask_utils
        out['mask_shapes'] = sorted({tuple(int(s) for s in m['size']) for m in pred['masks']})
elif isinstance(pred, dict):
    out.update(label=int(pred['pred_label']), cls=pred['pred_class'],
               sum=float(np.sum(pred['pred_scores'])), classes=list(inferencer.classes))
else:
    seg = np.asarray(pred)
    out.update(shape=list(seg.shape), min=int(seg.min()), max=int(seg.max()))
print('RESULT ' + json.dumps(out))
"""
# the wheel's mmposenc, its metadata and mmengine's own get_installed_path (not our wrapper),
# then the user config (``USER_CONFIG``) loaded after `import mmposenc`
WHEEL_LOAD = """\
import sys
import mmposenc, importlib.metadata as md
from mmengine.utils import get_installed_path
print(mmposenc.__file__, md.distribution("mmposenc")._path, get_installed_path("mmposenc"))
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1])
print(cfg.model.type, cfg.model.encoder_pos, cfg.model.peg_after, cfg.default_scope,
      cfg.custom_imports.imports)
"""


def _trained(project, mim_trains, task):
    """The 1-iteration checkpoint of ``task``: from the host's train.py of ``TRAIN_CASES``, for
    detection from `mim train mmposenc` with the wheel (``OURS``)."""
    if task == 'detection':
        return osp.join(mim_trains('wheel')[1], 'iter_1.pth')
    return osp.join(project['folder'], 'work_dirs', task, 'iter_1.pth')


@pytest.fixture(scope='module')
def with_hook(request, project, mim_trains):
    """The runs with the hook on, in the children of one fresh interpreter per install (see
    ``_fresh_children``), from the user's folder: a function of the install giving {name:
    (returncode, output)}: first the hosts' train.py of ``TRAIN_CASES`` (``train <task>``,
    work dir ``work_dirs/<task>``), then the hosts' test.py (``test <task>``) and inferencers
    (``infer <task>``, outputs in ``out_<task>``) of ``TEST_CASES`` with the user's configs and
    their checkpoints (see ``_trained``; the editable install's runs come after the wheel's);
    with the editable install also our tools/test.py on the checkpoint of `mim train mmposenc`
    (``our test``); with the wheel also ``WHEEL_LOAD`` (``load``)."""
    made = {}
    folder = project['folder']

    def get(install):
        if install not in made:
            if install == 'editable':
                get('wheel')  # the checkpoints of its trainings
            jobs, hosts = {}, set()
            for case_install, task in TRAIN_CASES:
                if case_install == install:
                    host = TASKS[task]['host']
                    hosts.add(host)
                    jobs[f'train {task}'] = dict(argv=[
                        _host_tool(host, 'train.py'), f'{task}.py', '--work-dir',
                        osp.join(folder, 'work_dirs', task), *TRAIN_OPTIONS.get(task, [])])
            for case_install, task in TEST_CASES:
                if case_install != install:
                    continue
                host = TASKS[task]['host']
                hosts.add(host)
                ckpt = _trained(project, mim_trains, task)
                jobs[f'test {task}'] = dict(argv=[
                    _host_tool(host, 'test.py'), f'{task}.py', ckpt, '--work-dir',
                    osp.join(folder, 'work_dirs', f'{task}_test_{install}')])
                jobs[f'infer {task}'] = dict(code=(
                    f'CONFIG, CHECKPOINT, IMAGE, OUT = {task + ".py"!r}, {ckpt!r}, '
                    f'{project["images"][TASKS[task]["image"]]!r}, '
                    f'{osp.join(folder, "out_" + task)!r}\n' + INFER[task] + REPORT))
            if install == 'editable':
                jobs['our test'] = dict(argv=[
                    osp.join(REPO_ROOT, 'tools', 'test.py'), OURS,
                    _trained(project, mim_trains, 'detection'), '--work-dir',
                    osp.join(folder, 'work_dirs', 'our_test')])
            else:
                jobs['load'] = dict(code=WHEEL_LOAD, argv=['user.py'])
            made[install] = _fresh_children(_python(request, install), jobs,
                                            sorted(f'{h}.apis' for h in hosts), folder)
        return made[install]

    return get


@pytest.mark.slow
@pytest.mark.parametrize('install,task', TRAIN_CASES)
def test_host_train_script(project, with_hook, install, task):
    """Each host's own tools/train.py (mmdet's with the editable install, mmseg's and
    mmpretrain's with the wheel) trains the user's config of its task (our model: the
    checkpoint holds our PEG weights) in a process that never imported mmposenc (see
    ``with_hook``)."""
    returncode, output = with_hook(install)[f'train {task}']
    assert returncode == 0, output[-5000:]
    _assert_checkpoint(_trained(project, None, task), task)


@pytest.mark.slow
@pytest.mark.parametrize('install,task', TEST_CASES)
def test_host_test_script(with_hook, install, task):
    """The host's tools/test.py evaluates the trained checkpoint on the user's data."""
    returncode, output = with_hook(install)[f'test {task}']
    assert returncode == 0, output[-5000:]
    assert TASKS[task]['metric'] + ':' in output, output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize('install,task', TEST_CASES)
def test_host_inferencer_on_one_image(request, project, with_hook, install, task):
    """DetInferencer (detection, instance segmentation), MMSegInferencer and
    ImageClassificationInferencer on one real image (COCO128 / ADE20K sample) with the user's
    config and its 1-iteration checkpoint, in a process that never imported mmposenc (see
    ``with_hook``): the model is ours (mmposenc imported by the config's custom_imports, from
    this install), the prediction is in the image's own pixel frame."""
    returncode, output = with_hook(install)[f'infer {task}']
    assert returncode == 0, output[-5000:]
    out = json.loads(output.split('RESULT ')[-1].split('\n')[0])
    assert out['mmposenc'] == _mmposenc_file(request, install)
    assert out['model'].startswith('mmposenc.') or out['backbone'].startswith('mmposenc.'), out
    w, h = out['width'], out['height']
    out_dir = osp.join(project['folder'], 'out_' + task)
    if task in ('detection', 'instance'):
        assert out['n'] > 0 and all(0 <= s <= 1 for s in out['scores'])
        assert all(-1 <= x1 <= x2 <= w + 1 and -1 <= y1 <= y2 <= h + 1
                   for x1, y1, x2, y2 in out['boxes']), out['boxes'][:5]
        assert len(os.listdir(osp.join(out_dir, 'vis'))) == 1
        if task == 'instance':
            assert out['mask_shapes'] == [[h, w]]
    elif task == 'semantic':
        assert out['shape'] == [h, w] and 0 <= out['min'] <= out['max'] < 150
        assert len(os.listdir(osp.join(out_dir, 'vis'))) == 1
    else:
        assert out['cls'] == out['classes'][out['label']] and len(out['classes']) == 3
        assert abs(out['sum'] - 1) < 1e-4


# ------------------------------------------------------------------ mmposenc's own tools ----
@pytest.mark.slow
def test_wheel_in_a_fresh_virtual_environment(project, wheel_environment, with_hook):
    """`pip wheel .` holds the package and .mim/{configs,tools,model-index.yml}; installed
    into a fresh venv it serves `mmposenc::` configs, `mim search` and `mim train`
    (``test_mim_train``).

    The fresh venv (``wheel_environment``) gets the wheel alone and this venv's site-packages
    as a plain path: the test checks that mmposenc and its metadata come from the wheel
    (``WHEEL_LOAD``, a child of the wheel's fresh interpreter, see ``with_hook``), that
    mmengine's own get_installed_path (not our wrapper) finds the installed package and that
    `mim search` lists the wheel's models.
    """
    env = wheel_environment
    src, wheel, py, site = env['src'], env['wheel'], env['python'], env['site']
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {osp.relpath(osp.join(r, f), src) for r, _, fs in os.walk(osp.join(src, 'configs'))
               for f in fs if f.endswith(('.py', '.yml', '.md'))}
    in_wheel = {n[len('mmposenc/.mim/'):] for n in names
                if n.startswith('mmposenc/.mim/configs/')}
    assert in_wheel == shipped and len(shipped) > 100
    for f in ('mmposenc/__init__.py', 'mmposenc/utils/config_package.py',
              'mmposenc/.mim/model-index.yml', 'mmposenc/.mim/tools/train.py',
              'mmposenc/utils/tools/runner.py', 'mmposenc/.mim/tools/test.py'):
        assert f in names, f

    returncode, output = with_hook('wheel')['load']
    assert returncode == 0, output[-3000:]
    where, loaded = output.strip().split('\n')[:2]
    package = osp.join(site, 'mmposenc')
    assert where.split() == [osp.join(package, '__init__.py'),
                             osp.join(site, 'mmposenc-0.1.0.dist-info'), package]
    assert loaded == "mmposenc.PEGDETR peg (0, 1) mmdet ['mmposenc.models.detectors']"

    res = _py(['-m', 'mim', 'search', 'mmposenc', '--valid-config'], python=py,
              cwd=project['folder'])
    listed = re.findall(r"'([^']+)'", res.stdout.split('valid config ids:')[-1])
    assert sorted(listed) == _model_names(src)


@pytest.mark.slow
def test_our_train_and_test_scripts_run_a_user_config_with_an_mmposenc_base(mim_trains,
                                                                             with_hook):
    """`PYTHONPATH=<repo> mim train mmposenc CONFIG` (how the README runs mim with the editable
    install: the repository's mmposenc.egg-info gives mim the source tree) runs our
    tools/train.py from the source tree, which parses the user's config, builds and initializes
    the user's model (its PEG weights in the init log) and enters the training loop (0
    iterations, ``MIM_TRAINS``; the wheel's run trains: ``test_mim_train``); `python
    <repo>/tools/test.py` evaluates the checkpoint of the same config (the wheel's `mim train`;
    no PYTHONPATH: the editable install's own mmposenc; a child of the editable install's
    fresh interpreter, see ``with_hook``)."""
    _assert_mim_sees_the_repository()
    res, work_dir = mim_trains('editable')
    # mim ran our train.py from the source tree's mmposenc/.mim/tools (a link to tools/)
    assert osp.join(REPO_ROOT, 'mmposenc', '.mim', 'tools', 'train.py') in res.stdout, (
        res.stdout[-3000:])
    assert 'Checkpoints will be saved to ' + work_dir in res.stdout, res.stdout[-3000:]
    log, = [osp.join(root, f) for root, _, files in os.walk(work_dir) for f in files
            if f.endswith('.log')]
    with open(log) as f:
        text = f.read()
    assert 'init_weights` of PEGDETR' in text and 'encoder.pegs.0.proj.weight' in text, log
    returncode, output = with_hook('editable')['our test']
    assert returncode == 0, output[-5000:]
    assert 'coco/bbox_mAP:' in output, output[-3000:]
