"""tools/train.py and tools/test.py drive a config end to end: log, checkpoint, metrics, --resume."""
import collections
import glob
import json
import os.path as osp
import re

import pytest

from conftest import REPO_ROOT
from forked_runs import run_tools

SMOKE = osp.join(REPO_ROOT, 'configs', 'smoke', 'detr_r18_1xb2-8it_coco128.py')
TOOLS = osp.join(REPO_ROOT, 'tools', '')


def _ok(res):
    assert res.returncode == 0, f'{res.args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
    return res


def _assert_quiet_training_log(out):
    """No line of mmengine's per-parameter optimizer noise and no repeated log record (the
    iteration lines aside): mmdet's DETR-R18 freezes its stem, stage 1 and batch norms; with
    mmengine's own constructor its run logged 46 requires_grad warnings and 60
    paramwise_options lines (mmposenc.SummaryOptimWrapperConstructor,
    tests/test_engine/test_optim_constructor.py)."""
    lines = [re.sub(r'^\d\d/\d\d \d\d:\d\d:\d\d - ', '', ln) for ln in out.splitlines()]
    records = [ln for ln in lines if re.match(r'\S+ - (INFO|WARNING|ERROR) - ', ln)
               and not re.search(r'Iter\(train\)', ln)]
    assert not any('paramwise_options' in ln for ln in lines)
    assert not any('is skipped since its requires_grad=False' in ln for ln in lines)
    repeated = {m: n for m, n in collections.Counter(records).items() if n > 1}
    assert not repeated, repeated
    assert sum('paramwise_cfg: ' in ln for ln in records) == 2  # the backbone key, frozen


def _coco128_options(root):
    root = root.rstrip('/') + '/'
    ann = root + 'annotations/instances_train2017.json'
    return ['--cfg-options', f'data_root={root}', f'train_dataloader.dataset.data_root={root}',
            f'val_dataloader.dataset.data_root={root}',
            f'test_dataloader.dataset.data_root={root}', f'val_evaluator.ann_file={ann}',
            f'test_evaluator.ann_file={ann}']


#: What the tools' processes share (tests/forked_runs.py): imported once, before the forks
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmdet.models', 'mmdet.datasets',
           'mmdet.evaluation', 'mmdet.engine', 'mmdet.visualization')


@pytest.fixture(scope='module')
def smoke_runs(coco128_root, tmp_path_factory):
    """The tools' processes of this module on COCO128, one after the other (each a fresh
    process forked from one interpreter that imported torch and mmdet, tests/forked_runs.py):

    - ``first``, ``second``: the one training of this module, the shipped smoke config through
      tools/train.py run from a folder outside the repository with ``--resume`` into the
      relative --work-dir ``work``: 1 iteration into the empty work dir, then the config's own
      8 iterations, resuming the first run's checkpoint;
    - ``test``: tools/test.py on the second run's checkpoint (8 images), ``--out`` predictions;
    - ``partial``: tools/test.py ``--allow-partial-load`` on a checkpoint that does not fit.
    """
    import torch
    root = coco128_root.rstrip('/') + '/'
    folder = tmp_path_factory.mktemp('user')
    ckpt = str(folder / 'peg.pth')
    torch.save({'state_dict': {'encoder_pos.proj.0.weight': torch.zeros(256, 1, 3, 3)}}, ckpt)
    base = [TOOLS + 'train.py', SMOKE, '--work-dir', 'work', '--resume', '--no-validate'] + \
        _coco128_options(coco128_root)
    runs = dict(
        first=base + ['train_cfg.max_iters=1', 'default_hooks.checkpoint.interval=1'],
        second=base,
        test=[TOOLS + 'test.py', SMOKE, str(folder / 'work' / 'iter_8.pth'), '--work-dir',
              'test', '--out', 'preds.pkl'] + _coco128_options(coco128_root)
        + ['test_dataloader.dataset.indices=8'],
        partial=['tools/test.py', SMOKE, ckpt, '--allow-partial-load', '--work-dir',
                 str(folder / 'partial'), '--cfg-options', f'data_root={root}',
                 f'test_dataloader.dataset.data_root={root}',
                 'test_dataloader.dataset.indices=2',
                 f'test_evaluator.ann_file={root}annotations/instances_train2017.json'])
    done = run_tools([dict(argv=argv, cwd=REPO_ROOT if name == 'partial' else str(folder))
                      for name, argv in runs.items()], preload=PRELOAD)
    out = dict(zip(runs, done), folder=folder)
    logs = sorted(glob.glob(str(folder / 'work' / '*' / '*.log')))
    if len(logs) == 2:  # the runs' timestamped folders, in order
        out['first_log'], out['second_log'] = (open(log).read() for log in logs)
    return out


@pytest.mark.slow
def test_smoke_train_then_test(smoke_runs):
    """The shipped smoke config through tools/train.py and tools/test.py, run from a folder
    outside the repository: the last iteration logged, the checkpoint, predictions and a real
    bbox_mAP; the training logs are quiet (both runs of this module's training; one training
    for this and what test_optim_constructor.py's training run checked before)."""
    for run in ('first', 'second'):
        _assert_quiet_training_log(_ok(smoke_runs[run]).stdout + smoke_runs[run].stderr)
    folder = smoke_runs['folder']
    assert osp.isfile(folder / 'work' / 'iter_8.pth'), sorted(glob.glob(f'{folder}/work/*'))
    assert 'Iter(train) [8/8]' in smoke_runs['second_log']
    _ok(smoke_runs['test'])
    assert osp.isfile(folder / 'preds.pkl')
    # the test run writes its metrics as json: a real bbox_mAP from pycocotools
    metric_files = sorted(glob.glob(str(folder / 'test' / '*' / '*.json')))
    metrics = json.load(open(metric_files[-1]))
    assert 'coco/bbox_mAP' in metrics and 0.0 <= metrics['coco/bbox_mAP'] <= 1.0


@pytest.mark.slow
def test_resume_with_nothing_to_resume_says_so_first(smoke_runs):
    """The shipped smoke config with --resume into an empty work dir: the log's first line
    says there is nothing to resume (not mmengine's 'Auto resumed from the latest checkpoint
    None' after the config); the second run resumes from the first one's checkpoint."""
    _ok(smoke_runs['first'])
    _ok(smoke_runs['second'])
    first = smoke_runs['first_log'].splitlines()[0]
    assert first.rstrip().endswith('--resume: nothing to resume in work (no '
                                   'last_checkpoint), training from scratch'), first
    assert 'Auto resumed' not in smoke_runs['first_log']
    text = smoke_runs['second_log']
    assert 'nothing to resume' not in text and 'resumed epoch: 0, iter: 1' in text


@pytest.mark.slow
def test_allow_partial_load_evaluates_a_checkpoint_that_does_not_fit(smoke_runs):
    """Without the flag this checkpoint is an error (tests/test_reliability/test_bad_inputs.py
    'test-tool-weights-do-not-fit'); with it the tool evaluates and says what did not load."""
    res = _ok(smoke_runs['partial'])
    log = res.stdout + res.stderr
    assert '--allow-partial-load: ' in log and 'unexpected keys (encoder_pos.proj.0.weight)' in log
    metric_files = sorted(glob.glob(str(smoke_runs['folder'] / 'partial' / '*' / '*.json')))
    assert 'coco/bbox_mAP' in json.load(open(metric_files[-1]))


@pytest.fixture(scope='module')
def rejected(tmp_path_factory):
    """The tools' command lines that must be refused, each a fresh process forked from one
    interpreter (tests/forked_runs.py): a missing config, a missing checkpoint, a config
    without a host scope."""
    folder = tmp_path_factory.mktemp('rejected')
    (folder / 'noscope.py').write_text('model = dict(type="mmposenc.PEG", in_channels=4)\n')
    runs = dict(config=['tools/train.py', str(folder / 'nope.py')],
                checkpoint=['tools/test.py', SMOKE, str(folder / 'x.pth')],
                scope=['tools/train.py', str(folder / 'noscope.py')])
    return dict(zip(runs, run_tools([dict(argv=a, cwd=REPO_ROOT) for a in runs.values()])))


def test_train_rejects_missing_config(rejected):
    res = rejected['config']
    assert res.returncode != 0 and 'does not exist' in res.stderr


def test_test_rejects_missing_checkpoint(rejected):
    res = rejected['checkpoint']
    assert res.returncode != 0 and 'x.pth does not exist' in res.stderr


def test_config_without_host_scope_is_rejected(rejected):
    res = rejected['scope']
    assert res.returncode != 0 and "default_scope=None" in res.stderr


def test_amp_picks_a_wrapper_that_runs_here():
    from mmposenc.engine import amp_optim_wrapper_type
    import torch
    expected = 'AmpOptimWrapper' if torch.cuda.is_available() else 'mmposenc.BF16OptimWrapper'
    assert amp_optim_wrapper_type() == expected


def _train_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'mmposenc_tools_train', osp.join(REPO_ROOT, 'tools', 'train.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('cuda', [False, True])
def test_amp_converts_a_wrapper_config_of_the_other_kind(cuda, monkeypatch):
    """--amp on an fp16 config (mmdet's / mmseg's ``AmpOptimWrapper`` with ``loss_scale``) on a
    CPU machine gives a BF16OptimWrapper that builds (no AmpOptimWrapper-only arguments left),
    and on a CUDA machine a BF16OptimWrapper config gives an AmpOptimWrapper without
    ``device_type``; a plain OptimWrapper config gets dynamic loss scaling on CUDA."""
    import torch
    from mmengine.config import Config
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: cuda)
    train = _train_tool()
    sgd = dict(type='SGD', lr=0.1)
    if cuda:
        cfg = Config(dict(optim_wrapper=dict(type='mmposenc.BF16OptimWrapper', device_type='cpu',
                                             optimizer=sgd, clip_grad=None)))
        train.apply_amp(cfg)
        assert cfg.optim_wrapper.to_dict() == dict(type='AmpOptimWrapper', optimizer=sgd,
                                                   clip_grad=None, loss_scale='dynamic')
        cfg = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', loss_scale=512.,
                                             optimizer=sgd)))
        train.apply_amp(cfg)  # the config's own loss scale stays
        assert cfg.optim_wrapper.to_dict() == dict(type='AmpOptimWrapper', loss_scale=512.,
                                                   optimizer=sgd)
        return
    from mmengine.optim import build_optim_wrapper

    from mmposenc.engine import BF16OptimWrapper
    cfg = Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', loss_scale=512.,
                                         dtype='float16', optimizer=sgd)))
    train.apply_amp(cfg)
    assert cfg.optim_wrapper.to_dict() == dict(type='mmposenc.BF16OptimWrapper', optimizer=sgd)
    wrapper = build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper)
    assert isinstance(wrapper, BF16OptimWrapper)


@pytest.mark.parametrize('checkpoint', [
    'https://download.openmmlab.com/mmdetection/v3.0/detr/detr.pth', 'torchvision://resnet50',
    'open-mmlab://detectron2/resnet50_caffe'])
def test_test_tool_passes_remote_checkpoints_to_the_runner(checkpoint, monkeypatch):
    """As mmdet's / mmseg's test tools, a URL or ``scheme://`` checkpoint goes to the Runner
    (mmengine's CheckpointLoader downloads it) instead of failing as a missing local file."""
    import importlib.util
    spec = importlib.util.spec_from_file_location('mmposenc_tools_test',
                                                  osp.join(REPO_ROOT, 'tools', 'test.py'))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    seen = {}

    class FakeRunner:
        def register_hook(self, hook):
            seen['hook'] = hook

        def test(self):
            return {}

    def fake_build_runner(cfg):
        seen['load_from'] = cfg.load_from
        return FakeRunner()

    monkeypatch.setattr(tool, 'build_runner', fake_build_runner)
    assert tool.main([SMOKE, checkpoint]) == {}
    assert seen['load_from'] == checkpoint and 'hook' in seen
