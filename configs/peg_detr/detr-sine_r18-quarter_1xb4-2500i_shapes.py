# A small DETR on the demo's synthetic shapes_coco (tools/demo.py,
# tools/dataset_converters/make_shapes_coco.py: 1000 train / 100 val images of 96-128 px), the
# DETR counterpart of ../peg_deformable_detr/deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py:
# same data, pipelines (no resizing: scale_factor 1), optimizer, schedule and evaluator; the
# model is DETR's (single level, softmax classification, mmdet's DETR losses and matching
# costs) at the demo's size: a quarter-width ResNet-18 from scratch cut after its third stage
# (stride 16, 64 channels: 6-8 tokens per side at 1x, 3-4 at 0.5x, where stride 32 would leave
# 2), 2 + 2 layers of width 64, 20 queries. Used by the detection resolution study
# (projects/detection_resolution), which also trains it with encoder_pos 'peg'.
_base_ = '../peg_deformable_detr/deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py'

embed_dims = 64

model = dict(
    _delete_=True,
    type='mmposenc.PEGDETR',  # mmposenc.models.detectors.PEGDETR
    encoder_pos='sine',
    num_queries=20,
    data_preprocessor=dict(
        type='DetDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        bgr_to_rgb=True,
        pad_size_divisor=1),
    backbone=dict(  # trained from scratch: no pretrained weights offline
        # mmdet's ResNet with its padding-exact mode, off as in the Deformable-DETR demo config
        # (its cost on this small model exceeds 3 %); model = dict(padding_exact=True) turns it on
        type='mmposenc.PaddingExactResNet',
        padding_exact=False,
        depth=18,
        base_channels=16,  # quarter width
        num_stages=3,  # C4 (stride 16) is the last stage
        strides=(1, 2, 2),
        dilations=(1, 1, 1),
        out_indices=(2, ),
        frozen_stages=-1,
        norm_cfg=dict(type='BN', requires_grad=True),
        norm_eval=False,
        style='pytorch',
        init_cfg=None),
    neck=dict(  # DETR's: a 1x1 conv, no norm (mixes no positions)
        type='ChannelMapper',
        in_channels=[64],
        kernel_size=1,
        out_channels=embed_dims,
        act_cfg=None,
        norm_cfg=None,
        num_outs=1),
    encoder=dict(  # DetrTransformerEncoder
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, dropout=0.0,
                               batch_first=True),
            ffn_cfg=dict(embed_dims=embed_dims, feedforward_channels=2 * embed_dims, num_fcs=2,
                         ffn_drop=0.0, act_cfg=dict(type='ReLU', inplace=True)))),
    decoder=dict(  # DetrTransformerDecoder
        num_layers=2,
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, dropout=0.0,
                               batch_first=True),
            cross_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, dropout=0.0,
                                batch_first=True),
            ffn_cfg=dict(embed_dims=embed_dims, feedforward_channels=2 * embed_dims, num_fcs=2,
                         ffn_drop=0.0, act_cfg=dict(type='ReLU', inplace=True))),
        return_intermediate=True),
    positional_encoding=dict(num_feats=embed_dims // 2, normalize=True),
    bbox_head=dict(  # DETRHead
        type='DETRHead',
        num_classes=3,
        embed_dims=embed_dims,
        loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                      loss_weight=1.0, class_weight=1.0),
        loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
    train_cfg=dict(
        assigner=dict(
            type='HungarianAssigner',
            match_costs=[
                dict(type='ClassificationCost', weight=1.0),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0)
            ])),
    test_cfg=dict(max_per_img=20))

# the demo's AdamW (lr 1e-3, clipping at 0.1) without Deformable-DETR's lr multipliers of the
# sampling offsets and reference points, which DETR does not have
optim_wrapper = dict(paramwise_cfg=dict(_delete_=True))
