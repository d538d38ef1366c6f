"""The encoder position switch on real data through tools/train.py and tools/test.py: the
shipped PEG configs of Conditional-DETR and DAB-DETR (CocoMetric on COCO128) and Mask2Former in
mmseg (IoUMetric on the COCO128-derived semantic set).

Each run is tiny: the shipped config with its data paths, image sizes (not multiples of 32, so
the batches are padded and the exact masks are used), schedule and model depth overridden
(ResNet-18 without a pretrained download, one or two transformer layers, few queries), one
training iteration: a format and plumbing check, not a result.

PEG-DINO (CocoMetric), Mask2Former in mmdet (CocoMetric bbox + segm on COCO128) and in mmseg on
the ADE20K sample (IoUMetric) are trained and evaluated by
tests/test_configs/test_mmposenc_base_train_step.py, with the overrides of this module
(``COCO_DET``, ``DETECTORS``, ``MASK2FORMER_SMALL``, ``SEG``), from a user's folder through
``mmposenc::`` bases.
"""
import glob
import importlib.util
import os.path as osp

import pytest

from conftest import REPO_ROOT

CFG = osp.join(REPO_ROOT, 'configs')


def _tool(name, folder='tools'):
    spec = importlib.util.spec_from_file_location(
        f'mmposenc_{folder.replace("/", "_")}_{name}', osp.join(REPO_ROOT, folder, f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_and_test(cfg_path, work_dir, iters):
    """tools/train.py for ``iters`` iterations, then tools/test.py on its checkpoint; the
    metrics of the test."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: OpenMP threads would spin
    try:
        _tool('train').main([str(cfg_path), '--work-dir', work_dir,
                             '--cfg-options', 'randomness.seed=0'])
        ckpt = osp.join(work_dir, f'iter_{iters}.pth')
        assert osp.isfile(ckpt), glob.glob(osp.join(work_dir, '*'))
        return _tool('test').main([str(cfg_path), ckpt, '--work-dir', work_dir])
    finally:
        torch.set_num_threads(threads)


SCHEDULE = """
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters={iters}, val_interval=1000)
param_scheduler = []
log_processor = dict(by_epoch=False)
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(by_epoch=False, interval={iters}))
"""

COCO_DET = """
_base_ = '{base}'
data_root = '{root}/'
small_train = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask={masks}),
    dict(type='Resize', scale=(200, 150), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
small_test = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(200, 150), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask={masks}),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True), batch_sampler=None,
    dataset=dict(type='CocoDataset', data_root=data_root,
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=8, pipeline=small_train,
                 filter_cfg=dict(filter_empty_gt=True, min_size=32)))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(type='CocoDataset', data_root=data_root,
                 ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=2, pipeline=small_test))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
test_evaluator = val_evaluator
"""

#: per shipped PEG config: how it is shrunk (ResNet-18, fewer layers and queries)
DETECTORS = {
    'conditional-detr': ('peg_conditional_detr/conditional-detr-peg_r50_8xb2-50e_coco.py', """
model = dict(num_queries=20, backbone=dict(depth=18, init_cfg=None),
             neck=dict(in_channels=[512]), encoder=dict(num_layers=1),
             decoder=dict(num_layers=2), test_cfg=dict(max_per_img=20))
"""),
    'dab-detr': ('peg_dab_detr/dab-detr-peg_r50_8xb2-50e_coco.py', """
model = dict(num_queries=20, backbone=dict(depth=18, init_cfg=None),
             neck=dict(in_channels=[512]), encoder=dict(num_layers=1),
             decoder=dict(num_layers=2), test_cfg=dict(max_per_img=20))
"""),
    'dino': ('peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py', """
model = dict(num_queries=20, backbone=dict(depth=18, init_cfg=None),
             neck=dict(in_channels=[128, 256, 512]), encoder=dict(num_layers=1),
             decoder=dict(num_layers=2),
             dn_cfg=dict(group_cfg=dict(num_dn_queries=10)), test_cfg=dict(max_per_img=20))
"""),
}

MASK2FORMER_SMALL = """
model = dict(
    {head}=dict(
        num_queries=10,
        in_channels=[64, 128, 256, 512],
        pixel_decoder=dict(encoder=dict(num_layers=1)),
        transformer_decoder=dict(num_layers=2){extra_head}),
    backbone=dict(depth=18, init_cfg=None){extra_model})
"""


@pytest.mark.slow
@pytest.mark.parametrize('name', ['conditional-detr', 'dab-detr'])  # DINO: see the docstring
def test_detector_trains_and_reports_coco_ap(name, coco128_root, tmp_path):
    config, shrink = DETECTORS[name]
    cfg = tmp_path / f'{name}_coco128.py'
    cfg.write_text(COCO_DET.format(base=osp.join(CFG, config), root=coco128_root, masks=False)
                   + shrink + SCHEDULE.format(iters=1))
    metrics = _train_and_test(cfg, str(tmp_path / 'work'), 1)
    assert 0.0 <= metrics['coco/bbox_mAP'] <= 1.0
    assert {'coco/bbox_mAP_50', 'coco/bbox_mAP_75'} <= set(metrics)


SEG = """
_base_ = '{base}'
crop_size = (128, 128)
num_classes = {num_classes}
train_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations'{reduce}),
    dict(type='RandomResize', scale=(256, 128), ratio_range=(0.5, 1.2), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size), dict(type='PackSegInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'), dict(type='Resize', scale=(250, 125), keep_ratio=True),
    dict(type='LoadAnnotations'{reduce}), dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True), dataset={train})
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False, dataset={val})
test_dataloader = val_dataloader
""" + MASK2FORMER_SMALL.format(
    head='decode_head',
    extra_head=(',\n        num_classes=num_classes,'
                '\n        loss_cls=dict(class_weight=[1.0] * num_classes + [0.1]),'
                '\n        train_cfg=dict(num_points=256)'),
    extra_model=',\n    data_preprocessor=dict(size=crop_size)')


def _seg_config(tmp_path, num_classes, reduce, dataset):
    cfg = tmp_path / 'mask2former_seg.py'
    cfg.write_text(SEG.format(
        base=osp.join(CFG, 'peg_mask2former', 'mask2former-peg_r50_8xb2-160k_ade20k-512x512.py'),
        num_classes=num_classes, reduce=reduce,
        train=dataset.replace('PIPE', 'train_pipeline').replace('SPLIT', 'train'),
        val=dataset.replace('PIPE', 'test_pipeline').replace('SPLIT', 'val'))
        + SCHEDULE.format(iters=1))
    return cfg


@pytest.mark.slow
def test_mask2former_semantic_on_coco128_semseg(coco128_root, tmp_path):
    """mmseg's Mask2Former with the PEG pixel decoder on the COCO128-derived semantic set
    (tools/dataset_converters/coco_to_semseg.py, 3 classes + background: the head's classes
    and class weights overridden): IoUMetric."""
    out = str(tmp_path / 'coco_semseg')
    stats = _tool('coco_to_semseg', 'tools/dataset_converters').convert(
        coco128_root, out, num_classes=3, max_size=160)
    classes = tuple(stats['classes'])
    dataset = f"""dict(type='BaseSegDataset', data_root='{out}', img_suffix='.jpg',
        seg_map_suffix='.png', metainfo=dict(classes={classes!r}),
        data_prefix=dict(img_path='img_dir/SPLIT', seg_map_path='ann_dir/SPLIT'),
        pipeline=PIPE, indices=6)"""
    cfg = _seg_config(tmp_path, len(classes), '', dataset)
    metrics = _train_and_test(cfg, str(tmp_path / 'work'), 1)
    assert 0.0 <= metrics['mIoU'] <= 100.0
