"""tools/train.py and tools/test.py drive a config end to end: log, checkpoint, metrics."""
import collections
import glob
import json
import os.path as osp
import re
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SMOKE = osp.join(REPO_ROOT, 'configs', 'smoke', 'detr_r18_1xb2-8it_coco128.py')
TOOLS = osp.join(REPO_ROOT, 'tools', '')


def _run(args, cwd=REPO_ROOT):
    res = subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, f'{args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
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


@pytest.mark.slow
def test_smoke_train_then_test(coco128_root, tmp_path):
    """The shipped smoke config through tools/train.py and tools/test.py, run from a folder
    outside the repository: the last iteration logged, the checkpoint, predictions and a real
    bbox_mAP; the training log is quiet (one process for this and what
    test_optim_constructor.py's training run checked before)."""
    work_dir = str(tmp_path / 'smoke')
    data_root = coco128_root.rstrip('/') + '/'
    opts = ['--cfg-options', f'data_root={data_root}',
            f'train_dataloader.dataset.data_root={data_root}',
            f'val_dataloader.dataset.data_root={data_root}',
            f'test_dataloader.dataset.data_root={data_root}',
            f'val_evaluator.ann_file={data_root}annotations/instances_train2017.json',
            f'test_evaluator.ann_file={data_root}annotations/instances_train2017.json']
    res = _run([TOOLS + 'train.py', SMOKE, '--work-dir', work_dir, '--no-validate'] + opts,
               cwd=str(tmp_path))
    _assert_quiet_training_log(res.stdout + res.stderr)
    ckpt = osp.join(work_dir, 'iter_8.pth')
    assert osp.isfile(ckpt), sorted(glob.glob(work_dir + '/*'))
    logs = glob.glob(osp.join(work_dir, '*', '*.log'))
    assert logs and 'Iter(train) [8/8]' in open(logs[0]).read()

    out = str(tmp_path / 'preds.pkl')
    _run([TOOLS + 'test.py', SMOKE, ckpt, '--work-dir', work_dir, '--out', out] + opts,
         cwd=str(tmp_path))
    assert osp.isfile(out)
    # the test run writes its metrics as json: a real bbox_mAP from pycocotools
    metric_files = sorted(glob.glob(osp.join(work_dir, '*', '*.json')))
    metrics = json.load(open(metric_files[-1]))
    assert 'coco/bbox_mAP' in metrics and 0.0 <= metrics['coco/bbox_mAP'] <= 1.0


@pytest.mark.slow
def test_allow_partial_load_evaluates_a_checkpoint_that_does_not_fit(coco128_root, tmp_path):
    """Without the flag this checkpoint is an error (tests/test_reliability/test_bad_inputs.py
    'test-tool-weights-do-not-fit'); with it the tool evaluates and says what did not load."""
    import torch
    root = coco128_root.rstrip('/') + '/'
    ckpt = str(tmp_path / 'peg.pth')
    torch.save({'state_dict': {'encoder_pos.proj.0.weight': torch.zeros(256, 1, 3, 3)}}, ckpt)
    work_dir = str(tmp_path / 'work')
    res = _run(['tools/test.py', SMOKE, ckpt, '--allow-partial-load', '--work-dir', work_dir,
                '--cfg-options', f'data_root={root}', f'test_dataloader.dataset.data_root={root}',
                'test_dataloader.dataset.indices=2',
                f'test_evaluator.ann_file={root}annotations/instances_train2017.json'])
    log = res.stdout + res.stderr
    assert '--allow-partial-load: ' in log and 'unexpected keys (encoder_pos.proj.0.weight)' in log
    metric_files = sorted(glob.glob(osp.join(work_dir, '*', '*.json')))
    assert 'coco/bbox_mAP' in json.load(open(metric_files[-1]))


def test_train_rejects_missing_config(tmp_path):
    res = subprocess.run([sys.executable, 'tools/train.py', str(tmp_path / 'nope.py')],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert res.returncode != 0 and 'does not exist' in res.stderr


def test_test_rejects_missing_checkpoint(tmp_path):
    res = subprocess.run([sys.executable, 'tools/test.py', SMOKE, str(tmp_path / 'x.pth')],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    assert res.returncode != 0 and 'x.pth does not exist' in res.stderr


def test_config_without_host_scope_is_rejected(tmp_path):
    cfg = tmp_path / 'noscope.py'
    cfg.write_text('model = dict(type="mmposenc.PEG", in_channels=4)\n')
    res = subprocess.run([sys.executable, 'tools/train.py', str(cfg)], cwd=REPO_ROOT,
                         capture_output=True, text=True)
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
