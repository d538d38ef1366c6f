"""PEG-DETR and PEG-Deformable-DETR on real images: a few training iterations on coco128 with
tools/train.py, then tools/test.py with CocoMetric reports a pycocotools AP."""
import glob
import importlib.util
import os.path as osp

import pytest

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _tool(name):
    """tools/<name>.py as a module (in process, so its return value is at hand)."""
    spec = importlib.util.spec_from_file_location(
        f'mmposenc_tools_{name}', osp.join(REPO, 'tools', f'{name}.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

#: the shipped config and the neck inputs of its backbone shrunk to ResNet-18
CONFIGS = {
    'peg-detr': ('configs/peg_detr/detr-peg_r50_16xb2-50e_coco.py', [512]),
    'peg-deformable-detr': ('configs/peg_deformable_detr/deformable-detr-peg_r50_16xb2-50e_coco.py',
                            [128, 256, 512]),
}

# The shipped config (its transformer layers, PEG after encoder layer 0, schedule and
# checkpoint hook), at a CPU-friendly scale: 192 px, the backbone a ResNet-18 (the same
# PaddingExactResNet) without a pretrained download, two encoder and two decoder layers (the
# PEG between them, as in the six-layer encoder) and 20 queries, 2 training images (one epoch:
# one iteration of 2), evaluation on 2 images against the full coco128 annotations.
SMALL = """
_base_ = '{base}'
data_root = '{root}/'
small_train = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=(192, 192), keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
small_test = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(192, 192), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
model = dict(backbone=dict(depth=18, init_cfg=None), neck=dict(in_channels={neck_in}),
             num_queries=20, encoder=dict(num_layers=2), decoder=dict(num_layers=2),
             test_cfg=dict(max_per_img=20))
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=2, pipeline=small_train))
val_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(data_root=data_root, ann_file='annotations/instances_train2017.json',
                 data_prefix=dict(img='train2017/'), indices=2, pipeline=small_test))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
test_evaluator = val_evaluator
train_cfg = dict(max_epochs=1, val_interval=100)
"""


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_train_then_test_reports_coco_ap(name, coco128_root, tmp_path):
    train_tool, test_tool = _tool('train'), _tool('test')
    cfg_path = tmp_path / f'{name}_coco128.py'
    config, neck_in = CONFIGS[name]
    cfg_path.write_text(SMALL.format(base=osp.join(REPO, config), root=coco128_root,
                                     neck_in=neck_in))
    work_dir = str(tmp_path / 'work_dir')
    train_tool.main([str(cfg_path), '--work-dir', work_dir,
                     '--cfg-options', 'randomness.seed=0'])
    checkpoints = glob.glob(osp.join(work_dir, 'epoch_*.pth'))
    assert checkpoints, 'training wrote no checkpoint'
    metrics = test_tool.main([str(cfg_path), checkpoints[0], '--work-dir', work_dir])
    ap = metrics['coco/bbox_mAP']
    assert isinstance(ap, float) and 0.0 <= ap <= 1.0
    assert {'coco/bbox_mAP_50', 'coco/bbox_mAP_75'} <= set(metrics)
