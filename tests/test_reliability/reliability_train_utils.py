"""A tiny CPVT classifier config on synthetic PNGs, driven through tools/train.py."""
import glob
import json
import os
import os.path as osp
import socket
import subprocess

import numpy as np

from conftest import REPO_ROOT

CONFIG = '''
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['mmposenc.models', 'global_loss_hook'],
                      allow_failed_imports=False)
model = dict(
    type='ImageClassifier',
    data_preprocessor=dict(num_classes=2, mean=[127.5] * 3, std=[64.0] * 3, to_rgb=True),
    backbone=dict(  # CPVT: two layers of width 32, a 3x3 PEG after the first
        type='mmposenc.CPVT',
        arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64),
        img_size=32, patch_size=8),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=2, in_channels=32,
              loss=dict(type='CrossEntropyLoss')))
train_dataloader = dict(
    batch_size={batch_size},
    num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='CustomDataset', data_root={data_root!r},
                 pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]))
train_cfg = dict(by_epoch=False, max_iters={max_iters})
val_cfg = None
val_dataloader = None
val_evaluator = None
optim_wrapper = dict(optimizer=dict(type='AdamW', lr=1e-3, weight_decay=0.05))
param_scheduler = [dict(type='LinearLR', start_factor=0.5, by_epoch=False, begin=0,
                        end={sched_end})]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=1),
    checkpoint=dict(type='CheckpointHook', interval={ckpt_interval}, by_epoch=False))
custom_hooks = [dict(type='GlobalLossHook')]
randomness = dict(seed=0, deterministic=True)
# no CPU workaround here: tools/train.py itself makes a distributed launch work without CUDA
'''

# Logs the training loss averaged over all processes: mmengine logs rank 0's loss only.
HOOK = '''
from mmengine.dist import all_reduce
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class GlobalLossHook(Hook):
    priority = 'ABOVE_NORMAL'  # runs before the LoggerHook writes the iteration's scalars

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        loss = outputs['loss'].detach().clone()
        all_reduce(loss, op='mean')
        runner.message_hub.update_scalar('train/global_loss', float(loss))
'''


def write_images(root, num_per_class=8, size=32):
    """Two classes of random PNGs (class 1 brighter), written once per test."""
    import cv2
    rng = np.random.default_rng(0)
    for c in range(2):
        os.makedirs(osp.join(root, f'class{c}'), exist_ok=True)
        for i in range(num_per_class):
            img = rng.integers(0, 160, (size, size, 3)) + 80 * c
            cv2.imwrite(osp.join(root, f'class{c}', f'{i:03d}.png'), img.astype(np.uint8))
    return root


def write_config(tmp_path, name, data_root, batch_size, max_iters, ckpt_interval,
                 sched_end=None):
    (tmp_path / 'global_loss_hook.py').write_text(HOOK)
    path = tmp_path / f'{name}.py'
    path.write_text(CONFIG.format(batch_size=batch_size, data_root=str(data_root),
                                  max_iters=max_iters, ckpt_interval=ckpt_interval,
                                  sched_end=sched_end or max_iters))
    return str(path)


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run(cmd, tmp_path, timeout=300, env=None):
    full_env = dict(os.environ, **(env or {}))
    full_env['PYTHONPATH'] = os.pathsep.join(
        [str(tmp_path), REPO_ROOT, full_env.get('PYTHONPATH', '')])
    full_env.setdefault('OMP_NUM_THREADS', '1')
    res = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
                         env=full_env)
    assert res.returncode == 0, f'{cmd} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
    return res


def read_scalars(work_dir, key='loss'):
    """``{iter: value}`` from every run's ``vis_data/scalars.json`` in ``work_dir``."""
    out = {}
    files = sorted(glob.glob(osp.join(str(work_dir), '*', 'vis_data', 'scalars.json')))
    assert files, f'no scalars.json under {work_dir}'
    for f in files:
        for line in open(f):
            rec = json.loads(line)
            if key in rec and 'iter' in rec:
                out[rec['iter']] = rec[key]
    return out


#: one uninterrupted single-process run and its resumed half per pytest session (its base temp
#: folder), shared by test_resume.py and test_dist_train.py (both on one pytest-xdist worker:
#: xdist_group)
_SINGLE_RUNS = {}
SINGLE_RUN_GROUP = 'reliability_single_run'
#: what the training processes share (tests/forked_runs.py): imported once, before the forks
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmpretrain.models',
           'mmpretrain.datasets', 'mmpretrain.engine')


def single_run(tmp_path_factory, num_iters, batch_size):
    """One uninterrupted ``tools/train.py`` run of the tiny CPVT (``num_iters`` iterations of
    ``batch_size``, a checkpoint every ``num_iters // 2``) and, after it, ``tools/train.py
    --resume`` in the work dir of a run killed after its iteration-``num_iters // 2``
    checkpoint: that checkpoint (a link to the uninterrupted run's) and the ``last_checkpoint``
    file naming it, as mmengine's CheckpointHook leaves them. Both are fresh processes, one
    after the other, forked from one interpreter that imported torch, mmengine and mmpretrain,
    never mmposenc (tests/forked_runs.py; their point is the loss curve, so the config's
    formatting is memoized: ``memoize_formatting``); trained once per session and returned as
    ``(folder, data_root, config, work_dir, resumed_work_dir)``."""
    key = (str(tmp_path_factory.getbasetemp()), num_iters, batch_size)
    if key not in _SINGLE_RUNS:
        from forked_runs import run_tools
        tmp = tmp_path_factory.mktemp('single_run')
        data = write_images(str(tmp / 'data'))
        cfg = write_config(tmp, 'single', data, batch_size=batch_size, max_iters=num_iters,
                           ckpt_interval=num_iters // 2)
        full_dir, resumed_dir = tmp / 'single', tmp / 'resumed'
        half = f'iter_{num_iters // 2}.pth'
        resumed_dir.mkdir()
        (resumed_dir / half).symlink_to(full_dir / half)  # written by the first run
        (resumed_dir / 'last_checkpoint').write_text(str(resumed_dir / half))
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join([str(tmp), REPO_ROOT, env.get('PYTHONPATH', '')])
        env.setdefault('OMP_NUM_THREADS', '1')
        train = osp.join(REPO_ROOT, 'tools', 'train.py')
        done = run_tools([dict(argv=[train, cfg, '--work-dir', str(full_dir)], cwd=REPO_ROOT),
                          dict(argv=[train, cfg, '--work-dir', str(resumed_dir), '--resume'],
                               cwd=REPO_ROOT)], preload=PRELOAD, env=env, timeout=600,
                         memoize_formatting=True)
        for res in done:
            assert res.returncode == 0, \
                f'{res.args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
        _SINGLE_RUNS[key] = (tmp, data, cfg, full_dir, resumed_dir)
    return _SINGLE_RUNS[key]
