"""PEG backbones on real data: detection (coco128), segmentation (ADE20K sample and a
COCO128-derived semantic set) and classification (COCO128 object crops).

Each run is tiny (a handful of iterations, small images) and uses the shipped configs with
only data paths, image sizes and schedules overridden.
"""
import glob
import importlib.util
import json
import os.path as osp

import pytest

from conftest import REPO_ROOT

CFG = osp.join(REPO_ROOT, 'configs')


def _tool(name, folder='tools/dataset_converters'):
    path = osp.join(REPO_ROOT, folder, f'{name}.py')
    spec = importlib.util.spec_from_file_location(
        f'mmposenc_{folder.replace("/", "_")}_{name}', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_and_test(cfg_path, work_dir, iters, test=True):
    """tools/train.py (``--no-validate``) for ``iters`` iterations, then (``test``)
    tools/test.py on its checkpoint, in this process (their ``main``: a fresh process per tool
    would add ~5 CPU-s of imports each; the tools' command lines are tested in
    tests/test_tools); the metrics of the test."""
    import torch
    threads = torch.get_num_threads()
    # one intra-op thread: on a shared 2-core machine two OpenMP threads per process spin
    # against other processes and run ~10x slower (measured: PVTPEG-T fwd+bwd 1 s vs 11 s)
    torch.set_num_threads(1)
    # mmdet's and mmseg's runtimes name their visualizer 'visualizer', and mmengine hands a
    # later Runner of this process the instance of that name, which writes the scalars into
    # the first run's work dir: a name of this run's own
    def vis(tool):
        return ['--cfg-options', f'visualizer.name={work_dir}:{tool}']

    try:
        _tool('train', 'tools').main([str(cfg_path), '--work-dir', work_dir, '--no-validate']
                                     + vis('train'))
        ckpt = osp.join(work_dir, f'iter_{iters}.pth')
        assert osp.isfile(ckpt), glob.glob(osp.join(work_dir, '*'))
        if test:
            return _tool('test', 'tools').main([str(cfg_path), ckpt, '--work-dir', work_dir]
                                               + vis('test'))
    finally:
        torch.set_num_threads(threads)


def _log_values(work_dir, key):
    """Values of ``key`` in the mmengine scalars.json of ``work_dir``."""
    files = sorted(glob.glob(osp.join(work_dir, '*', 'vis_data', 'scalars.json')))
    vals = []
    for f in files:
        for line in open(f):
            rec = json.loads(line)
            if key in rec:
                vals.append(rec[key])
    return vals


@pytest.mark.slow
def test_pvt_peg_retinanet_trains_and_evaluates_on_coco128(coco128_root, tmp_path):
    root = coco128_root.rstrip('/') + '/'
    ann = root + 'annotations/instances_train2017.json'
    cfg = tmp_path / 'retinanet_pvt-peg-t_coco128.py'
    cfg.write_text(f"""
_base_ = ['{CFG}/pvt_peg/retinanet_pvt-peg-t_fpn_1x_coco.py']
data_root = '{root}'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(256, 256), keep_ratio=True),
    dict(type='PackDetInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(256, 256), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                          'scale_factor'))]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    data_root=data_root, ann_file='annotations/instances_train2017.json',
    data_prefix=dict(img='train2017/'), pipeline=train_pipeline, indices=2))
val_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False, dataset=dict(
    data_root=data_root, ann_file='annotations/instances_train2017.json',
    data_prefix=dict(img='train2017/'), pipeline=test_pipeline, indices=2))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{ann}')
test_evaluator = val_evaluator
# an untrained RetinaNet scores ~0.01 (its prior): keep every box so CocoMetric has work;
# no ImageNet checkpoint of the backbone here (the shipped config names one)
model = dict(test_cfg=dict(score_thr=0.0, max_per_img=20), backbone=dict(init_cfg=None))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=1, val_interval=100)
param_scheduler = []
log_processor = dict(by_epoch=False)
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval=1))
""")
    work_dir = str(tmp_path / 'work')
    metrics = _train_and_test(cfg, work_dir, 1)
    losses = _log_values(work_dir, 'loss')
    assert len(losses) == 1 and all(l == l and l > 0 for l in losses)  # finite, positive
    assert 0.0 <= metrics['coco/bbox_mAP'] <= 1.0


#: training iterations of the PVTPEG-T Semantic FPN that must learn the COCO128 semantic set
LEARN_ITERS = 8


def _semseg_cfg(tmp_path, body, model_extra=''):
    cfg = tmp_path / 'fpn_pvt-peg.py'
    cfg.write_text(f"""
_base_ = ['{CFG}/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']
crop_size = (128, 128)
model = dict(data_preprocessor=dict(size=crop_size),
             backbone=dict(drop_path_rate=0.0, init_cfg=None), {model_extra})
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=ITERS, val_interval=1000)
param_scheduler = []
log_processor = dict(by_epoch=False)
default_hooks = dict(logger=dict(interval=1), checkpoint=dict(by_epoch=False, interval=ITERS))
{body}
""")
    return cfg


@pytest.mark.slow
def test_pvt_peg_semantic_fpn_on_ade20k_sample(ade20k_sample_root, tmp_path):
    """Format check: the ADE20K layout loads, trains (one iteration) and reports mIoU. (Also
    asserted, with mmseg's own tools/train.py and tools/test.py, by
    tests/test_packaging/test_startup_hook.py's semantic task on the same config and data.)"""
    root = ade20k_sample_root.rstrip('/') + '/sampleData/'
    ds = f"""dict(type='ADE20KDataset', data_root='{root}',
        data_prefix=dict(img_path='images', seg_map_path='annotations'), pipeline=PIPE)"""
    body = f"""
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='RandomResize', scale=(256, 128), ratio_range=(0.8, 1.2), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size), dict(type='PackSegInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='Resize', scale=(256, 128), keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True), dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
    dataset={ds.replace('PIPE', 'train_pipeline')})
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
    dataset={ds.replace('PIPE', 'test_pipeline')})
test_dataloader = val_dataloader
"""
    cfg = _semseg_cfg(tmp_path, body)
    cfg.write_text(cfg.read_text().replace('ITERS', '1'))
    metrics = _train_and_test(cfg, str(tmp_path / 'work'), 1)
    assert 0.0 <= metrics['mIoU'] <= 100.0


@pytest.mark.slow
def test_coco_to_semseg_converter_and_pvt_peg_learns(coco128_root, tmp_path):
    """The COCO128-derived semantic set: the converter writes consistent pairs, and a
    PVTPEG Semantic FPN fits it (training loss drops)."""
    import numpy as np
    from PIL import Image
    out = str(tmp_path / 'coco_semseg')
    stats = _tool('coco_to_semseg').convert(coco128_root, out, num_classes=3, max_size=128)
    assert stats['classes'][0] == 'background' and len(stats['classes']) == 4
    assert stats['train'] + stats['val'] == 128 and stats['val'] > 0
    labels = [np.asarray(Image.open(p)) for p in sorted(glob.glob(out + '/ann_dir/train/*.png'))]
    imgs = sorted(glob.glob(out + '/img_dir/train/*.jpg'))
    assert len(labels) == len(imgs) == stats['train']
    assert Image.open(imgs[0]).size[::-1] == labels[0].shape
    values = np.unique(np.concatenate([l.ravel() for l in labels]))
    assert set(values.tolist()) == {0, 1, 2, 3}

    classes = tuple(stats['classes'])
    ds = f"""dict(type='BaseSegDataset', data_root='{out}', img_suffix='.jpg',
        seg_map_suffix='.png', metainfo=dict(classes={classes!r}),
        data_prefix=dict(img_path='img_dir/SPLIT', seg_map_path='ann_dir/SPLIT'),
        pipeline=PIPE, indices=8)"""
    body = f"""
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
    dict(type='RandomCrop', crop_size=crop_size), dict(type='PackSegInputs')]
test_pipeline = [dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'),
                 dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=4, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset={ds.replace('PIPE', 'train_pipeline').replace('SPLIT', 'train')})
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
    dataset={ds.replace('PIPE', 'test_pipeline').replace('SPLIT', 'val')})
test_dataloader = val_dataloader
optim_wrapper = dict(optimizer=dict(lr=1e-3))
randomness = dict(seed=0)
"""
    cfg = _semseg_cfg(tmp_path, body, f'decode_head=dict(num_classes={len(classes)})')
    # 8 iterations (seed 0): the mean loss of the last 3 is 0.50 of the first 3's (0.924 ->
    # 0.460); 15 iterations gave ~0.2 over the first and last 5, 30 ~0.02
    cfg.write_text(cfg.read_text().replace('ITERS', str(LEARN_ITERS)))
    work_dir = str(tmp_path / 'work')
    _train_and_test(cfg, work_dir, LEARN_ITERS, test=False)
    losses = _log_values(work_dir, 'loss')
    assert len(losses) == LEARN_ITERS
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f'PVTPEG-T Semantic FPN on COCO128 semseg: loss {first:.3f} -> {last:.3f} '
          f'({last / first:.2f} of the first, bound 0.8)')
    assert last < 0.8 * first, losses


@pytest.mark.slow
def test_cpvt_tiny_classifier_on_coco_crops_at_several_resolutions(coco128_root, tmp_path):
    """CPVT-Ti (depth shrunk to 4) learns COCO128 object crops at 64 px and is evaluated at
    48, 64, 96 and 80x112 px with no fine-tuning and no interpolation (the trained weights of
    the one Runner, a TestLoop per resolution). 20 iterations (seed 0): the logged loss falls
    from 1.046 (mean of the first 5) to 0.837 (last 5; 40 iterations: 1.009 -> 0.701 over the
    first and last 8)."""
    import torch
    from mmengine.config import Config
    from mmengine.runner import Runner
    out = str(tmp_path / 'crops')
    stats = _tool('coco_crops_cls').convert(coco128_root, out, num_classes=3, min_size=24,
                                            max_size=72, max_per_class=40)
    print('COCO128 crops:', stats)
    assert len(stats['classes']) == 3 and stats['train'] > 50 and stats['val'] > 10
    for split in ('train', 'val'):
        assert sorted(osp.basename(d) for d in glob.glob(f'{out}/{split}/*')) == \
            sorted(stats['classes'])

    def pipeline(size, train):
        p = [dict(type='LoadImageFromFile'), dict(type='Resize', scale=size)]
        if train:
            p.append(dict(type='RandomFlip', prob=0.5, direction='horizontal'))
        return p + [dict(type='PackInputs')]

    def loader(split, size, train):
        return dict(batch_size=16, num_workers=0, persistent_workers=False,
                    sampler=dict(type='InfiniteSampler' if train else 'DefaultSampler',
                                 shuffle=train),
                    dataset=dict(type='CustomDataset', data_root=f'{out}/{split}',
                                 pipeline=pipeline(size, train)))

    cfg = Config.fromfile(osp.join(CFG, 'cpvt', 'cpvt-tiny_4xb256_in1k.py'))
    cfg.model.backbone.arch = dict(embed_dims=192, num_layers=4, num_heads=3,
                                   feedforward_channels=768)
    cfg.model.backbone.drop_path_rate = 0.
    cfg.model.backbone.patch_size = 8
    cfg.model.head.num_classes = 3
    cfg.model.head.loss = dict(type='CrossEntropyLoss')
    cfg.model.train_cfg = None
    cfg.model.data_preprocessor = dict(num_classes=3, mean=[123.675, 116.28, 103.53],
                                       std=[58.395, 57.12, 57.375], to_rgb=True)
    cfg.data_preprocessor = cfg.model.data_preprocessor
    cfg.train_dataloader = loader('train', (64, 64), True)
    cfg.val_dataloader = cfg.val_cfg = cfg.val_evaluator = None
    cfg.test_dataloader = loader('val', (64, 64), False)
    cfg.test_evaluator = dict(type='Accuracy', topk=(1, ))
    cfg.test_cfg = dict()
    cfg.train_cfg = dict(by_epoch=False, max_iters=CPVT_ITERS)
    cfg.param_scheduler = []
    cfg.optim_wrapper.optimizer.lr = 1e-3
    cfg.optim_wrapper.optimizer.weight_decay = 0.01
    cfg.log_processor = dict(by_epoch=False)
    cfg.default_hooks.logger = dict(type='LoggerHook', interval=1)
    # no checkpoint: the resolutions are tested with the trained weights in memory
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False,
                                        interval=CPVT_ITERS + 1, save_last=False)
    cfg.work_dir = str(tmp_path / 'work')
    cfg.randomness = dict(seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see _train_and_test: OpenMP spinning on a shared 2-core box
    try:
        _train_and_test_cpvt(cfg, loader, Runner)
    finally:
        torch.set_num_threads(threads)


#: training iterations of the CPVT-Ti classifier on the COCO128 crops
CPVT_ITERS = 20


def _train_and_test_cpvt(cfg, loader, Runner):
    import numpy as np
    from mmengine.runner import TestLoop
    runner = Runner.from_cfg(cfg)
    runner.train()
    losses = _log_values(cfg.work_dir, 'loss')
    assert len(losses) == CPVT_ITERS, losses
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    print(f'CPVT-Ti on COCO128 crops: loss {first:.3f} -> {last:.3f}')
    assert last < first, losses

    accs = {}
    for size in [(48, 48), (64, 64), (96, 96), (80, 112)]:
        # the config's test evaluator on the validation crops resized to `size`
        metrics = TestLoop(runner, loader('val', size, False), cfg.test_evaluator).run()
        accs[size] = metrics['accuracy/top1']
    # every resolution runs with the same weights and gives a valid accuracy
    assert all(0.0 <= a <= 100.0 for a in accs.values()), accs
    print('CPVT accuracy by test resolution (no fine-tuning):', accs)
