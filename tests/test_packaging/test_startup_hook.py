"""The startup hook: `_base_ = 'mmposenc::...'` through the hosts' own entry points.

mmposenc installs ``mmposenc-startup.pth`` into site-packages (regular and editable installs);
at interpreter start it puts one finder in front of ``sys.meta_path``, which registers mmposenc
with mmengine's config loader when ``mmengine.config`` is imported (``_mmposenc_startup.py``).
Every run here is a fresh Python process that never imports mmposenc itself (the hosts'
test.py, inferencers and hook-off train.py: forked children of one such process per install,
each starting with nothing of mmposenc imported, see ``RUNS``):

- what the hook costs: the modules an interpreter imports at startup (one more: the hook),
  nothing imported when it registers (no mmposenc, no torch), the finder gone afterwards, the
  off switch ``MMPOSENC_NO_STARTUP_HOOK=1``; timings: tools/benchmark/startup_hook_cost.py;
- that the editable wheel (``pip install -e .``, as tools/setup_env.sh installs) and the regular
  wheel both install it, and that a half-uninstalled or broken hook never breaks Python;
- a user config in a folder outside the repository with an ``mmposenc::`` base, through
  mmdet's / mmseg's / mmpretrain's ``tools/train.py`` and ``tools/test.py`` (as shipped in
  their wheels, ``<host>/.mim/tools``), ``mim train <host>``, and ``DetInferencer``,
  ``MMSegInferencer`` and ``ImageClassificationInferencer`` on one real image, with the
  editable install (this virtual environment) and with the wheel in a throwaway environment.
"""
import json
import os
import os.path as osp
import shutil
import sys
import tempfile
import zipfile

import pytest
from test_package_install import (QUIET, VENV_SITE, _copy_source, _env, _run,
                                  wheel_environment)

from conftest import REPO_ROOT

# under pytest-xdist (make test) on one worker: the module's project, checkpoints and wheel
# are made once, the wheel environment together with test_package_install.py's wheel test
pytestmark = pytest.mark.xdist_group('wheel_environment')

PTH = 'mmposenc-startup.pth'
HOOK = '_mmposenc_startup'
OFF = 'MMPOSENC_NO_STARTUP_HOOK'
REFUSED = 'AssertionError: mmengine does not support to load mmposenc config.'


def _py(args, python=sys.executable, cwd=None, off=False, check=True, **extra):
    """``python -W ignore args`` in a fresh process, no PYTHONPATH, by default in an empty
    folder (``-c`` puts the working directory first on sys.path: in the repository its
    mmposenc would shadow the install under test); ``off`` sets the switch."""
    env = _env(**extra)
    env.pop(OFF, None)
    if off:
        env[OFF] = '1'
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


def _startup(python, **kw):
    return json.loads(_py(['-c', STARTUP], python=python, **kw).stdout)


def test_at_startup_the_hook_imports_itself_only():
    """With the hook, `python -c ...` imports one module more than without (the hook's own,
    from the source tree for the editable install) and puts one finder first; nothing of
    mmengine, torch or mmposenc. The off switch leaves the interpreter as without the hook."""
    python = _editable_python()
    on, off = _startup(python), _startup(python, off=True)
    assert set(on['modules']) - set(off['modules']) == {HOOK}
    assert set(off['modules']) <= set(on['modules'])
    assert not [m for m in on['modules'] if m.split('.')[0] in ('mmengine', 'torch', 'mmposenc')]
    assert on['finders'] == ['MMEngineConfigFinder'] + off['finders']
    assert on['hook'] == osp.join(REPO_ROOT, HOOK + '.py') and off['hook'] is None


AFTER_MMENGINE = """\
import json, sys
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


def test_importing_mmengine_config_registers_mmposenc():
    """`import mmengine.config` registers `mmposenc` (the package folder of the editable
    install: the source tree) and imports only the hook's copy of config_package.py beyond
    what mmengine imports without the hook; mmengine.config keeps its own loader, and the
    finder takes itself out (later imports do not pass through it)."""
    python = _editable_python()
    on = json.loads(_py(['-c', AFTER_MMENGINE], python=python).stdout)
    off = json.loads(_py(['-c', AFTER_MMENGINE], python=python, off=True).stdout)
    assert on['registered'] == 'mmposenc' and off['registered'] is None
    assert on['folder'] == osp.join(REPO_ROOT, 'mmposenc')
    assert on['mmdet'] == off['mmdet']
    assert set(on['new']) - set(off['new']) == {'_mmposenc_config_package'}
    assert not [m for m in on['new'] if m.split('.')[0] in ('mmposenc', 'torch')]
    assert on['loader'] == off['loader'] == 'SourceFileLoader'
    assert on['spec_loader_is_loader']
    assert 'MMEngineConfigFinder' not in on['finders'] and on['finders'] == off['finders']


USER_CONFIG = """\
# a user's own config, outside the repository
_base_ = 'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py'
model = dict(peg_after=(0, 1))
"""
PARSE = """\
import sys
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1], import_custom_modules=False)
print(cfg.model.type, cfg.model.peg_after, 'mmposenc' in sys.modules)
"""


def test_user_config_parses_without_importing_mmposenc_and_the_off_switch(tmp_path):
    """A user config with an `mmposenc::` base parses in a fresh process that never imports
    mmposenc (the package stays unimported); with MMPOSENC_NO_STARTUP_HOOK=1 mmengine refuses
    it as it does without the hook."""
    python = _editable_python()
    (tmp_path / 'user.py').write_text(USER_CONFIG)
    res = _py(['-c', PARSE, 'user.py'], python=python, cwd=str(tmp_path))
    assert res.stdout.split('\n')[0] == 'mmposenc.PEGDETR (0, 1) False', res.stdout
    res = _py(['-c', PARSE, 'user.py'], python=python, cwd=str(tmp_path), off=True,
              check=False)
    assert res.returncode != 0 and REFUSED in res.stderr, res.stderr[-2000:]


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
# smallest shipped config of each kind; only data, schedule and no-download overrides; the
# hosts' test.py evaluates one image: what is tested is the entry point, not the metric).
_SCHEDULE = """
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1)
val_dataloader = val_evaluator = val_cfg = None
param_scheduler = []
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=1), logger=dict(interval=1))
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


@pytest.fixture(scope='module')
def project(tmp_path_factory, coco128_root, ade20k_sample_root):
    """The user's folder with one config per task (the classification data: COCO128 object
    crops in class folders, made with tools/dataset_converters/coco_crops_cls.py)."""
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
    images = dict(coco=osp.join(roots['coco'], 'train2017', '000000000009.jpg'),
                  ade=osp.join(roots['ade'], 'images', 'ADE_val_00000001.jpg'))
    return dict(folder=str(folder), images=images)


def _assert_checkpoint(path, task):
    import torch
    state = torch.load(path, map_location='cpu', weights_only=False)
    assert state['meta']['iter'] == 1
    ours = [k for k in state['state_dict'] if k.startswith(TASKS[task]['ours'])]
    assert ours, f'{path} holds no {TASKS[task]["ours"]}* weights: not our model'


@pytest.fixture(scope='module')
def checkpoints(request, project):
    """One 1-iteration checkpoint per task, made on first use by the host's own
    ``.mim/tools/train.py`` in a fresh process that never imports mmposenc: mmdet's run
    directly with the editable install (this environment) for instance segmentation, and
    ``mim train <host>`` with the wheel for the other three tasks (mim runs the same script in a
    new process of the wheel's interpreter; it prints the command). One training run per task,
    not one per task and install: the script is the same either way, and past the startup hook,
    which the two installs put in place differently (tested above), so is the code."""
    made = {}

    def get(task):
        if task not in made:
            host = TASKS[task]['host']
            if HOST_OF.get(host) == task:  # detection, semantic, classification
                work_dir = osp.join(project['folder'], 'work_dirs', f'mim_{host}_wheel')
                res = _py(['-m', 'mim', 'train', host, f'{task}.py', '--work-dir', work_dir],
                          python=request.getfixturevalue('wheel_python'),
                          cwd=project['folder'])
                assert osp.join(host, '.mim', 'tools', 'train.py') in res.stdout
            else:
                work_dir = osp.join(project['folder'], 'work_dirs', task)
                _py([_host_tool(host, 'train.py'), f'{task}.py', '--work-dir', work_dir],
                    python=_editable_python(), cwd=project['folder'])
            made[task] = osp.join(work_dir, 'iter_1.pth')
            _assert_checkpoint(made[task], task)
        return made[task]

    return get


@pytest.fixture(scope='module')
def wheel_python(tmp_path_factory):
    """A throwaway environment with mmposenc installed from its wheel (built from a copy of
    the source; shared with test_package_install.py, see its ``wheel_environment``); this
    environment's site-packages appended as a plain path for the pinned stack (its .pth files,
    the editable mmposenc's among them, do not run there)."""
    env = wheel_environment(tmp_path_factory)
    with zipfile.ZipFile(env['wheel']) as z:
        assert z.read(PTH) == open(osp.join(REPO_ROOT, PTH), 'rb').read()
        assert HOOK + '.py' in z.namelist()
    site_dir = env['site']
    assert osp.isfile(osp.join(site_dir, PTH)) and osp.isfile(osp.join(site_dir, HOOK + '.py'))
    return env['python']


def _python(request, install):
    """The interpreter of an install: this environment (editable) or the wheel's."""
    if install == 'editable':
        return _editable_python()
    return request.getfixturevalue('wheel_python')


# The hosts' test.py and inferencers run once per task: with the editable install for instance
# segmentation, semantic segmentation and classification, with the wheel for detection (each
# install once at least); the hosts' train.py runs once per task (see ``checkpoints``): past
# the startup hook, which the two installs put in place differently (tested above), the paths
# are the same code.
TEST_CASES = [('editable', 'instance'), ('editable', 'semantic'), ('editable', 'classification'),
              ('wheel', 'detection')]

# The hosts' scripts and inferencers run in forked children of one fresh interpreter per
# install, which imports the stack once (torch and the hosts' apis: what every check imports;
# nothing of mmposenc, asserted). ``import mmengine.config`` there runs the startup hook as in
# any fresh interpreter; each child starts from that state, runs one host script as
# ``python <script> <args>`` runs it (``runpy`` as ``__main__``, the script's folder first on
# sys.path) or one inference snippet, with its stdout and stderr in a file of its own.
RUNS = """\
import json, os, runpy, sys, traceback
jobs = json.loads(sys.argv[1])
for host in sys.argv[2:]:
    __import__(host + '.apis')
early = sorted(m for m in sys.modules if m.split('.')[0] == 'mmposenc')
assert not early, f'imported before the checks: {early}'


def run(job):
    if 'script' in job:
        sys.argv = [job['script'], *job['args']]
        sys.path[0] = os.path.dirname(job['script'])
        runpy.run_path(job['script'], run_name='__main__')
    else:
        exec(compile(job['code'], '<snippet>', 'exec'), dict(__name__='__main__'))


def in_child(job):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        out = os.open(job['log'], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        code = 0
        try:
            run(job)
        except SystemExit as err:
            code = err.code if isinstance(err.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


print('RETURNCODES ' + json.dumps({job['log']: in_child(job) for job in jobs}))
"""


def _fresh_children(python, jobs, hosts, cwd, off=False):
    """(returncode, stdout + stderr) of each job, run as ``RUNS`` runs them."""
    res = _py(['-c', RUNS, json.dumps(jobs), *hosts], python=python, cwd=cwd, off=off)
    codes = json.loads(res.stdout.split('RETURNCODES ')[-1])
    return [(codes[job['log']], open(job['log']).read()) for job in jobs]


def _mmposenc_file(python):
    """Where ``import mmposenc`` comes from for ``python`` (the editable source tree or the
    wheel's site-packages)."""
    return _py(['-c', 'import importlib.util as u; print(u.find_spec("mmposenc").origin)'],
               python=python).stdout.strip()


@pytest.mark.slow
def test_wheel_install_startup_and_registration(wheel_python):
    """The regular wheel: at startup the hook alone is imported (from the wheel's
    site-packages), `import mmengine.config` registers the wheel's package folder, and the
    off switch leaves both as without the hook."""
    site_dir = osp.dirname(osp.dirname(_mmposenc_file(wheel_python)))
    on, off = _startup(wheel_python), _startup(wheel_python, off=True)
    assert set(on['modules']) - set(off['modules']) == {HOOK}
    assert on['hook'] == osp.join(site_dir, HOOK + '.py')
    after = json.loads(_py(['-c', AFTER_MMENGINE], python=wheel_python).stdout)
    assert after['folder'] == osp.join(site_dir, 'mmposenc')
    assert not [m for m in after['new'] if m.split('.')[0] in ('mmposenc', 'torch')]
    after_off = json.loads(_py(['-c', AFTER_MMENGINE], python=wheel_python, off=True).stdout)
    assert after_off['registered'] is None


@pytest.mark.slow
@pytest.mark.parametrize('task', [t for t in TASKS if t not in HOST_OF.values()])
def test_host_train_script(project, checkpoints, task):
    """mmdet's own tools/train.py, run directly with the editable install, trains the user's
    config (our model: the checkpoint holds our PEG weights) in a fresh process without
    import mmposenc (see ``checkpoints``)."""
    assert osp.isfile(checkpoints(task))


@pytest.mark.slow
@pytest.mark.parametrize('host', list(HOST_OF))
def test_mim_train(project, checkpoints, host):
    """`mim train <host> CONFIG` with the wheel (mim runs the host's .mim/tools/train.py in a
    new process of the same interpreter; the fixture checks its command) trains the user's
    config of each host: mmdet's, mmseg's and mmpretrain's own train.py (see
    ``checkpoints``)."""
    assert osp.isfile(checkpoints(HOST_OF[host]))


@pytest.fixture(scope='module')
def refusals(project, tmp_path_factory):
    """Each host's tools/train.py on the user config of its task with the hook off, in the
    children of one fresh interpreter started with ``MMPOSENC_NO_STARTUP_HOOK=1`` (see
    ``RUNS``): {host: (returncode, output)}."""
    logs = tmp_path_factory.mktemp('refused')
    jobs = [dict(script=_host_tool(host, 'train.py'), log=str(logs / f'{host}.log'),
                 args=[f'{task}.py', '--work-dir',
                       osp.join(project['folder'], 'work_dirs', f'refused_{host}')])
            for host, task in HOST_OF.items()]
    results = _fresh_children(_editable_python(), jobs, list(HOST_OF), project['folder'],
                              off=True)
    return dict(zip(HOST_OF, results))


@pytest.mark.slow
@pytest.mark.parametrize('host', list(HOST_OF))
def test_without_the_hook_the_host_train_script_refuses(refusals, host):
    """The same user configs with the hook off: each host's tools/train.py stops at parsing
    with mmengine's refusal (what the hook fixes)."""
    returncode, output = refusals[host]
    assert returncode != 0 and REFUSED in output, output[-2000:]


@pytest.fixture(scope='module')
def host_runs(request, project, checkpoints, tmp_path_factory):
    """The hosts' test.py and inferencers of TEST_CASES with the user's configs and their
    checkpoints, in the children of one fresh interpreter per install (see ``RUNS``): a function
    of (what, install, task), what 'test' or 'infer', giving (returncode, output, out_dir)."""
    made = {}

    def get(what, install, task):
        if install not in made:
            logs = tmp_path_factory.mktemp(f'runs_{install}')
            jobs, keys = [], []
            for case_install, case_task in TEST_CASES:
                if case_install != install:
                    continue
                ckpt = checkpoints(case_task)
                host = TASKS[case_task]['host']
                work_dir = osp.join(project['folder'], 'work_dirs', f'{case_task}_test_{install}')
                jobs.append(dict(script=_host_tool(host, 'test.py'),
                                 args=[f'{case_task}.py', ckpt, '--work-dir', work_dir],
                                 log=str(logs / f'test_{case_task}.log')))
                out_dir = str(logs / f'out_{case_task}')
                image = project['images'][TASKS[case_task]['image']]
                jobs.append(dict(code=(f'CONFIG, CHECKPOINT, IMAGE, OUT = {case_task + ".py"!r}, '
                                       f'{ckpt!r}, {image!r}, {out_dir!r}\n'
                                       + INFER[case_task] + REPORT),
                                 log=str(logs / f'infer_{case_task}.log')))
                keys += [('test', case_task, work_dir), ('infer', case_task, out_dir)]
            hosts = sorted({TASKS[k[1]]['host'] for k in keys})
            results = _fresh_children(_python(request, install), jobs, hosts, project['folder'])
            made[install] = {(k[0], k[1]): (*r, k[2]) for k, r in zip(keys, results)}
        return made[install][(what, task)]

    return get


@pytest.mark.slow
@pytest.mark.parametrize('install,task', TEST_CASES)
def test_host_test_script(host_runs, install, task):
    """The host's tools/test.py evaluates the trained checkpoint on the user's data."""
    returncode, output, _ = host_runs('test', install, task)
    assert returncode == 0, output[-5000:]
    assert TASKS[task]['metric'] + ':' in output, output[-3000:]


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


@pytest.mark.slow
@pytest.mark.parametrize('install,task', TEST_CASES)
def test_host_inferencer_on_one_image(request, host_runs, install, task):
    """DetInferencer (detection, instance segmentation), MMSegInferencer and
    ImageClassificationInferencer on one real image (COCO128 / ADE20K sample) with the user's
    config and its 1-iteration checkpoint, in a process that never imported mmposenc (see
    ``host_runs``): the model is ours (mmposenc imported by the config's custom_imports, from
    this install), the prediction is in the image's own pixel frame."""
    python = _python(request, install)
    returncode, output, out_dir = host_runs('infer', install, task)
    assert returncode == 0, output[-5000:]
    out = json.loads(output.split('RESULT ')[-1].split('\n')[0])
    assert out['mmposenc'] == _mmposenc_file(python)
    assert out['model'].startswith('mmposenc.') or out['backbone'].startswith('mmposenc.'), out
    w, h = out['width'], out['height']
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
