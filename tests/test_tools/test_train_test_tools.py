"""tools/train.py and tools/test.py drive a config end to end: log, checkpoint, metrics, --resume."""
import collections
import glob
import json
import os
import os.path as osp
import re

import pytest

from conftest import REPO_ROOT
from forked_runs import run_tools

SMOKE = osp.join(REPO_ROOT, 'configs', 'smoke', 'detr_r18_1xb2-8it_coco128.py')
TOOLS = osp.join(REPO_ROOT, 'tools', '')
ANN = 'annotations/instances_train2017.json'


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
#: the tests that read the runs on COCO128 (slow: a training); without them (``-m "not slow"``,
#: ``-k``) or without COCO128 the module runs only the refused command lines
COCO128_TESTS = ('test_smoke_train_then_test', 'test_resume_with_nothing_to_resume_says_so_first',
                 'test_allow_partial_load_evaluates_a_checkpoint_that_does_not_fit',
                 'test_mmdets_own_train_tool_stops_before_training')


def _coco128_runs(root, folder):
    """The runs on COCO128 (see :func:`tool_runs`), from ``folder``."""
    import torch
    root = root.rstrip('/') + '/'
    ckpt = str(folder / 'peg.pth')
    torch.save({'state_dict': {'encoder_pos.proj.0.weight': torch.zeros(256, 1, 3, 3)}}, ckpt)
    # COCO128 with a negative-width box: annotation 1774 of image 74 (its images linked)
    bad = folder / 'bad_coco'
    (bad / 'annotations').mkdir(parents=True)
    (bad / 'train2017').symlink_to(root + 'train2017')
    data = json.load(open(root + ANN))
    assert data['annotations'][0]['id'] == 1774
    data['annotations'][0]['bbox'][2] = -3
    (bad / ANN).write_text(json.dumps(data))
    import mmdet
    mmdet_train = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    base = [TOOLS + 'train.py', SMOKE, '--work-dir', 'work', '--resume', '--no-validate'] + \
        _coco128_options(root)
    return dict(
        first=(base + ['train_cfg.max_iters=1', 'default_hooks.checkpoint.interval=1'], folder),
        second=(base + ['train_cfg.max_iters=2'], folder),
        test=([TOOLS + 'test.py', SMOKE, str(folder / 'work' / 'iter_2.pth'), '--work-dir',
               'test', '--out', 'preds.pkl'] + _coco128_options(root)
              + ['test_dataloader.dataset.indices=8'], folder),
        partial=(['tools/test.py', SMOKE, ckpt, '--allow-partial-load', '--work-dir',
                  str(folder / 'partial'), '--cfg-options', f'data_root={root}',
                  f'test_dataloader.dataset.data_root={root}',
                  'test_dataloader.dataset.indices=2',
                  f'test_evaluator.ann_file={root}{ANN}'], REPO_ROOT),
        mmdet=([mmdet_train, SMOKE, '--work-dir', str(folder / 'mmdet_work'), '--cfg-options',
                f'train_dataloader.dataset.data_root={bad}/',
                f'val_dataloader.dataset.data_root={bad}/',
                f'val_evaluator.ann_file={bad}/{ANN}', 'train_cfg.max_iters=1',
                'train_cfg.val_interval=10'],  # (mmdet would train)
               folder))


@pytest.fixture(scope='module')
def tool_runs(request, tmp_path_factory):
    """The tools' processes of this module, one after the other, each a fresh process forked
    from one interpreter that imported torch and mmdet, never mmposenc (tests/forked_runs.py;
    PYTHONPATH unset, as in a user's shell):

    - refused command lines (from the repository root): ``config``, a missing config;
      ``checkpoint``, a missing checkpoint; ``scope``, a config without a host scope;

    and, where COCO128 is there and a test of COCO128_TESTS runs:

    - ``first``, ``second``: the one training of this module, the shipped smoke config through
      tools/train.py run from a folder outside the repository with ``--resume`` into the
      relative --work-dir ``work``: 1 iteration into the empty work dir, then resumed from the
      first run's checkpoint to 2 iterations (the config's schedule, its logger interval of 2
      and its checkpoint at the end, shortened from 8 iterations: nothing asserted depends on
      their number);
    - ``test``: tools/test.py on the second run's checkpoint (8 images), ``--out`` predictions;
    - ``partial``: tools/test.py ``--allow-partial-load`` on a checkpoint that does not fit;
    - ``mmdet``: mmdet's own tools/train.py (as shipped in its wheel) on the smoke config, with
      COCO128's JSON given a negative-width box.
    """
    folder = tmp_path_factory.mktemp('user')
    (folder / 'noscope.py').write_text('model = dict(type="mmposenc.PEG", in_channels=4)\n')
    runs = dict(config=(['tools/train.py', str(folder / 'nope.py')], REPO_ROOT),
                checkpoint=(['tools/test.py', SMOKE, str(folder / 'x.pth')], REPO_ROOT),
                scope=(['tools/train.py', str(folder / 'noscope.py')], REPO_ROOT))
    wanted = {item.originalname for item in request.session.items
              if item.module is request.module}
    if wanted & set(COCO128_TESTS):
        try:
            runs.update(_coco128_runs(request.getfixturevalue('coco128_root'), folder))
        except pytest.skip.Exception:
            pass  # those tests skip on their own coco128_root
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    done = run_tools([dict(argv=argv, cwd=str(cwd)) for argv, cwd in runs.values()],
                     preload=PRELOAD, env=env)
    out = dict(zip(runs, done), folder=folder)
    logs = sorted(glob.glob(str(folder / 'work' / '*' / '*.log')))
    if len(logs) == 2:  # the runs' timestamped folders, in order
        out['first_log'], out['second_log'] = (open(log).read() for log in logs)
    return out


@pytest.fixture
def smoke_runs(coco128_root, tool_runs):
    """:func:`tool_runs` with the runs on COCO128."""
    return tool_runs


@pytest.mark.slow
def test_smoke_train_then_test(smoke_runs):
    """The shipped smoke config through tools/train.py and tools/test.py, run from a folder
    outside the repository: the last iteration logged, the checkpoint, predictions and a real
    bbox_mAP; the training logs are quiet (both runs of this module's training; one training
    for this and what test_optim_constructor.py's training run checked before)."""
    for run in ('first', 'second'):
        _assert_quiet_training_log(_ok(smoke_runs[run]).stdout + smoke_runs[run].stderr)
    folder = smoke_runs['folder']
    assert osp.isfile(folder / 'work' / 'iter_2.pth'), sorted(glob.glob(f'{folder}/work/*'))
    assert 'Iter(train) [2/2]' in smoke_runs['second_log']
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


@pytest.mark.slow
def test_mmdets_own_train_tool_stops_before_training(smoke_runs):
    """mmdet's tools/train.py as shipped in its wheel, in a fresh process, on the shipped smoke
    config with a negative-width box: the dataset check's line (mmposenc.CheckedCocoDataset,
    tests/test_datasets/test_dataset_check.py), no iteration."""
    res = smoke_runs['mmdet']
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f'{ANN}: annotation id 1774 (image 74): bbox width -3 <= 0' in out
    assert 'DatasetCheckError' in out and 'Iter(train)' not in out


def test_train_rejects_missing_config(tool_runs):
    res = tool_runs['config']
    assert res.returncode != 0 and 'does not exist' in res.stderr


def test_test_rejects_missing_checkpoint(tool_runs):
    res = tool_runs['checkpoint']
    assert res.returncode != 0 and 'x.pth does not exist' in res.stderr


def test_config_without_host_scope_is_rejected(tool_runs):
    res = tool_runs['scope']
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
