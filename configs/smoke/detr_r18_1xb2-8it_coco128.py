# Smoke run of the whole train/test tool chain: mmdet's own DETR-R18 config, made tiny, on the
# real COCO128 images in ../shared/data/coco128 (run from the repository root, or override
# data_root with --cfg-options). A few iterations, one checkpoint, CocoMetric on the same images.
_base_ = ['mmdet::detr/detr_r18_8xb2-500e_coco.py']

data_root = '../shared/data/coco128/'
image_scale = (256, 256)

model = dict(
    num_queries=20,
    backbone=dict(init_cfg=None),  # no download in the smoke run
    encoder=dict(num_layers=1, layer_cfg=dict(ffn_cfg=dict(feedforward_channels=256))),
    decoder=dict(num_layers=1, layer_cfg=dict(ffn_cfg=dict(feedforward_channels=256))),
    test_cfg=dict(max_per_img=20))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs',
         meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')),
]
_data = dict(
    type='mmposenc.CheckedCocoDataset',  # CocoDataset + mmposenc's dataset check
    data_root=data_root,
    ann_file='annotations/instances_train2017.json',
    data_prefix=dict(img='train2017/'))
train_dataloader = dict(
    batch_size=2, num_workers=0, persistent_workers=False,
    dataset=dict(pipeline=train_pipeline, **_data))
# CocoMetric scores every image of the annotation file, so validation sees all 128 images
val_dataloader = dict(
    batch_size=8, num_workers=0, persistent_workers=False,
    dataset=dict(pipeline=test_pipeline, **_data))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
test_evaluator = val_evaluator

train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=8, val_interval=8)
param_scheduler = []
default_hooks = dict(
    logger=dict(interval=2),
    checkpoint=dict(by_epoch=False, interval=8),
    visualization=dict(draw=False))
log_processor = dict(by_epoch=False)

# mmengine's parameter groups, logged as one line per rule, not one per parameter
optim_wrapper = dict(constructor='mmposenc.SummaryOptimWrapperConstructor')
