# The earlier demo, kept as the small model of tools/benchmark/peg_detr_speed.py and
# tools/analysis/batch_consistency.py: the demo config
# deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py (inherited: the shapes_coco dataset,
# pipelines, DetDataPreprocessor, losses, assigner, AdamW lr 1e-3 with clipping, runtime) at twice
# its width and with a shorter schedule: a half-width ResNet-18 (stages of 32-256 channels) from
# scratch, C4+C5 (two levels), 2+2 layers of width 128 with 4 sampling points, no box
# refinement, 20 queries, 400 iterations of 4 images. It was run on the older shapes_coco of
# 128-192 px images (no resizing either). deformable-detr-peg_r18-half_1xb4-400i_shapes.py
# inherits this file and changes only the encoder position encoding.
_base_ = './deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py'

embed_dims = 128
num_levels = 2

model = dict(
    num_feature_levels=num_levels,
    with_box_refine=False,
    backbone=dict(base_channels=32, out_indices=(2, 3)),  # half width, C4 + C5
    neck=dict(in_channels=[128, 256], out_channels=embed_dims, num_outs=num_levels),
    encoder=dict(
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims, num_levels=num_levels, num_points=4),
            ffn_cfg=dict(embed_dims=embed_dims, feedforward_channels=2 * embed_dims))),
    decoder=dict(
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims),
            cross_attn_cfg=dict(embed_dims=embed_dims, num_levels=num_levels, num_points=4),
            ffn_cfg=dict(embed_dims=embed_dims, feedforward_channels=2 * embed_dims))),
    positional_encoding=dict(num_feats=embed_dims // 2),
    bbox_head=dict(embed_dims=embed_dims))

val_dataloader = dict(batch_size=8)
test_dataloader = val_dataloader

max_iters = 400
optim_wrapper = dict(
    # 1e-3 rather than DETR's 1e-4..2e-4: a small model trained from scratch for 400 iterations
    # (measured with mmdet's ChannelMapper: mAP 0.002 -> 0.013 with PEG, 0.005 -> 0.005 with
    # sine; with MaskedChannelMapper at 1e-3, tools/analysis/batch_consistency.py: 0.021 / 0.008);
    # plain (not fused) AdamW
    optimizer=dict(_delete_=True, type='AdamW', lr=1e-3, weight_decay=1e-4))
train_cfg = dict(max_iters=max_iters, val_interval=max_iters + 1)  # no validation while training
param_scheduler = [
    dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=50),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=max_iters,
         milestones=[int(max_iters * 0.8)], gamma=0.1)
]
default_hooks = dict(checkpoint=dict(interval=max_iters))
