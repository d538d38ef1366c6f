"""PerViT-T as a detection backbone on real COCO128 images through tools/train.py (a process of
its own: its peak memory is measured) and tools/test.py: the shipped RetinaNet config, one
training iteration, CocoMetric.

Scale: the images are resized to fit 667 x 400 (half of mmdet's 1333 x 800 per side), i.e. at
most 26 x 42 tokens, not the full 50 x 84. One full-scale iteration takes minutes on 2 cores
(Phi_p of 12 blocks recomputed and back-propagated at 4,200 tokens), beyond a CI budget; the
full scale is measured by tools/analysis/pervit_detection_memory.py (numbers in
configs/pervit/README.md).

Memory bound (stated): the whole training process -- Python, torch, mmdet, the dataset,
model, optimizer, every activation -- peaks below 4 GiB at this scale (measured here: 2.4 GiB
for one iteration with batch 2 at 26 x 38 tokens, COCO128's first two images, 533 x 400 and
601 x 400 padded to 416 x 608; 2.8 GiB after a second iteration, which adds AdamW's state;
the peak is the first iteration's forward and backward, so one iteration measures it). For
comparison, the official Phi_p formulation alone holds
3.1 GB for backward at 26 x 38 tokens and 52 GB at the full 50 x 84
(tools/analysis/pervit_detection_memory.py, its count checked against autograd in
tests/test_tools/test_pervit_detection_memory.py). Keeping every query chunk's activations
instead of recomputing them (``ppe_cfg=dict(with_cp=False)``) breaks the bound: measured
4.9 GiB after this one iteration (5.6 GiB after two).
"""
import glob
import importlib.util
import json
import math
import os
import os.path as osp
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCALE = (667, 400)  # (w, h) as in mmdet's Resize
PEAK_BOUND = 4 * 2**30
# run a tool and report its peak resident set (KiB) on the last line: VmHWM, the high-water
# mark of the tool's own memory map. Not getrusage's ru_maxrss: Linux carries a process's
# maximum across fork and exec, so a tool started by a large process (a pytest-xdist worker
# that built other models first) reports its parent's peak (7.1 GiB seen here for 2.8).
WRAPPER = ('import json, runpy, sys; sys.argv = sys.argv[1:]; '
           "runpy.run_path(sys.argv[0], run_name='__main__'); "
           "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]; "
           'print(json.dumps(dict(maxrss_kib=int(hwm.split()[1]))))')


def _run(args):
    env = dict(os.environ, OMP_NUM_THREADS='1', MKL_NUM_THREADS='1')
    res = subprocess.run([sys.executable, '-c', WRAPPER] + args, cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, f'{args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
    return json.loads(res.stdout.strip().splitlines()[-1])['maxrss_kib'] * 1024


def _test_tool():
    spec = importlib.util.spec_from_file_location('mmposenc_tools_test',
                                                  osp.join(REPO_ROOT, 'tools', 'test.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scalars(work_dir):
    recs = []
    for f in sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json'))):
        recs += [json.loads(line) for line in open(f)]
    return recs


@pytest.mark.slow
def test_pervit_retinanet_trains_and_evaluates_on_coco128(coco128_root, tmp_path):
    root = coco128_root.rstrip('/') + '/'
    cfg = tmp_path / 'retinanet_pervit-t_coco128.py'
    cfg.write_text(f"""
_base_ = ['{REPO_ROOT}/configs/pervit/retinanet_pervit-t_fpn_1x_coco.py']
data_root = '{root}'
scale = {SCALE}
model = dict(
    backbone=dict(init_cfg=None),  # no ImageNet checkpoint in CI
    # an untrained RetinaNet scores ~0.01 (its prior): keep boxes so CocoMetric has work
    test_cfg=dict(score_thr=0.0, max_per_img=20))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                          'scale_factor'))]
_data = dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
             data_prefix=dict(img='train2017/'))
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        # one batch of the first two images: 533 x 400 and 601 x 400
                        dataset=dict(pipeline=train_pipeline, indices=2, **_data))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                      dataset=dict(pipeline=test_pipeline, indices=2, **_data))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
test_evaluator = val_evaluator
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1, val_interval=100)
param_scheduler = []
log_processor = dict(by_epoch=False)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(by_epoch=False, interval=1),
                     visualization=dict(draw=False))
""")
    work_dir = str(tmp_path / 'work')
    peak = _run(['tools/train.py', str(cfg), '--work-dir', work_dir, '--no-validate'])

    recs = [r for r in _scalars(work_dir) if 'loss' in r]
    assert [r['iter'] for r in recs] == [1]
    for r in recs:
        for k in ('loss', 'loss_cls', 'loss_bbox'):
            assert math.isfinite(r[k]) and r[k] > 0, (k, r)

    assert peak < PEAK_BOUND, f'training peaked at {peak / 2**30:.2f} GiB'
    print(f'peak RSS of tools/train.py: {peak / 2**30:.2f} GiB')

    ckpt = osp.join(work_dir, 'iter_1.pth')
    assert osp.isfile(ckpt)
    # the test needs no process of its own (the memory bound is the training's): tools/test.py's
    # main here, one fresh interpreter (~5 CPU-s of imports) fewer
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as _run's OMP_NUM_THREADS: a shared 2-core machine
    try:
        metrics = _test_tool().main([str(cfg), ckpt, '--work-dir', work_dir])
    finally:
        torch.set_num_threads(threads)
    assert 0.0 <= metrics['coco/bbox_mAP'] <= 1.0
