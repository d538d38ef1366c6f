# Demo: a small Deformable-DETR with its sine encoding on the synthetic shapes_coco dataset
# (tools/dataset_converters/make_shapes_coco.py; tools/demo.py generates it and trains this
# config and deformable-detr-peg_r18-half_1xb4-400i_shapes.py under identical settings on CPU).
# A half-width ResNet-18 (stages of 32-256 channels) from scratch, C4+C5, 2+2 layers of width
# 128, 20 queries, 400 iterations of 4 images.
_base_ = [
    'mmdet::_base_/datasets/coco_detection.py', 'mmdet::_base_/default_runtime.py'
]
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

data_root = 'data/shapes_coco/'
metainfo = dict(
    classes=('rectangle', 'ellipse', 'triangle'),
    palette=[(220, 20, 60), (0, 128, 255), (60, 180, 75)])
embed_dims = 128
num_levels = 2

model = dict(
    type='mmposenc.PEGDeformableDETR',  # mmposenc.models.detectors.PEGDeformableDETR
    encoder_pos='sine',
    num_queries=20,
    num_feature_levels=num_levels,
    with_box_refine=False,
    as_two_stage=False,
    data_preprocessor=dict(
        type='DetDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True,
        pad_size_divisor=1),
    backbone=dict(  # trained from scratch: no pretrained weights offline
        type='ResNet',
        depth=18,
        base_channels=32,  # half width: a CPU-sized backbone
        num_stages=4,
        out_indices=(2, 3),
        frozen_stages=-1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        style='pytorch',
        init_cfg=None),
    neck=dict(  # mmdet's ChannelMapper, padding-exact (type='ChannelMapper' for the stock one)
        type='mmposenc.MaskedChannelMapper',
        in_channels=[128, 256],
        kernel_size=1,
        out_channels=embed_dims,
        act_cfg=None,
        norm_cfg=dict(type='GN', num_groups=32),
        num_outs=num_levels),
    encoder=dict(  # PEGDeformableDetrTransformerEncoder
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=dict(
                embed_dims=embed_dims, num_heads=4, num_levels=num_levels, num_points=4,
                batch_first=True),
            ffn_cfg=dict(
                embed_dims=embed_dims, feedforward_channels=2 * embed_dims, ffn_drop=0.0))),
    decoder=dict(  # DeformableDetrTransformerDecoder
        num_layers=2,
        return_intermediate=True,
        layer_cfg=dict(
            self_attn_cfg=dict(
                embed_dims=embed_dims, num_heads=4, dropout=0.0, batch_first=True),
            cross_attn_cfg=dict(
                embed_dims=embed_dims, num_heads=4, num_levels=num_levels, num_points=4,
                batch_first=True),
            ffn_cfg=dict(
                embed_dims=embed_dims, feedforward_channels=2 * embed_dims, ffn_drop=0.0)),
        post_norm_cfg=None),
    positional_encoding=dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5),
    bbox_head=dict(  # DeformableDETRHead
        type='DeformableDETRHead',
        num_classes=3,
        embed_dims=embed_dims,
        sync_cls_avg_factor=True,
        loss_cls=dict(
            type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25, loss_weight=2.0),
        loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
    train_cfg=dict(
        assigner=dict(
            type='HungarianAssigner',
            match_costs=[
                dict(type='FocalLossCost', weight=2.0),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0)
            ])),
    test_cfg=dict(max_per_img=20))

# images are 128-192 px already: no resizing (scale_factor 1 keeps the meta keys complete)
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale_factor=1.0, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(type='Resize', scale_factor=1.0, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor'))
]
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    batch_sampler=None,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        filter_cfg=dict(filter_empty_gt=False, min_size=1),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(
    type='CocoMetric', ann_file=data_root + 'annotations/instances_val.json', metric='bbox')
test_evaluator = val_evaluator

max_iters = 400
optim_wrapper = dict(
    type='OptimWrapper',
    # 1e-3 rather than DETR's 1e-4..2e-4: a small model trained from scratch for 400 iterations
    # (measured with mmdet's ChannelMapper: mAP 0.002 -> 0.013 with PEG, 0.005 -> 0.005 with
    # sine; with MaskedChannelMapper at 1e-3, tools/analysis/batch_consistency.py: 0.021 / 0.008)
    optimizer=dict(type='AdamW', lr=1e-3, weight_decay=1e-4),
    clip_grad=dict(max_norm=0.1, norm_type=2),
    paramwise_cfg=dict(
        custom_keys={
            'sampling_offsets': dict(lr_mult=0.1),
            'reference_points': dict(lr_mult=0.1)
        }))
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters + 1)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        by_epoch=False,
        begin=0,
        end=max_iters,
        milestones=[int(max_iters * 0.8)],
        gamma=0.1)
]
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters,
                    max_keep_ckpts=1))
log_processor = dict(by_epoch=False)
randomness = dict(seed=0)
