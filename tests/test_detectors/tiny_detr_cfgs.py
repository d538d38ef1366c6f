"""Tiny DETR / Deformable-DETR configs and inputs shared by the detector tests (fast on CPU)."""
import copy
import logging

import torch

EMBED = 32
PREPROCESSOR = dict(
    type='DetDataPreprocessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_size_divisor=1)
BACKBONE = dict(
    type='ResNet',
    depth=18,
    base_channels=16,  # a quarter-width ResNet-18: stages of 16/32/64/128 channels
    num_stages=4,
    out_indices=(3, ),
    frozen_stages=-1,
    norm_cfg=dict(type='BN', requires_grad=True),
    norm_eval=True,
    style='pytorch')


def _ffn(dims=EMBED):
    return dict(embed_dims=dims, feedforward_channels=2 * dims, num_fcs=2, ffn_drop=0.0,
                act_cfg=dict(type='ReLU', inplace=True))


def detr_cfg(type='DETR', **kwargs):
    """A 2+2-layer DETR of width 32 on a quarter-width ResNet-18 C5, 5 queries, 3 classes."""
    cfg = dict(
        type=type,
        num_queries=5,
        data_preprocessor=PREPROCESSOR,
        backbone=BACKBONE,
        neck=dict(type='ChannelMapper', in_channels=[128], kernel_size=1,
                  out_channels=EMBED, act_cfg=None, norm_cfg=None, num_outs=1),
        encoder=dict(
            num_layers=2,
            layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=EMBED, num_heads=4, dropout=0.0,
                                   batch_first=True),
                ffn_cfg=_ffn())),
        decoder=dict(
            num_layers=2,
            layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=EMBED, num_heads=4, dropout=0.0,
                                   batch_first=True),
                cross_attn_cfg=dict(embed_dims=EMBED, num_heads=4, dropout=0.0,
                                    batch_first=True),
                ffn_cfg=_ffn()),
            return_intermediate=True),
        positional_encoding=dict(num_feats=EMBED // 2, normalize=True),
        bbox_head=dict(
            type='DETRHead',
            num_classes=3,
            embed_dims=EMBED,
            loss_cls=dict(type='CrossEntropyLoss', bg_cls_weight=0.1, use_sigmoid=False,
                          loss_weight=1.0, class_weight=1.0),
            loss_bbox=dict(type='L1Loss', loss_weight=5.0),
            loss_iou=dict(type='GIoULoss', loss_weight=2.0)),
        train_cfg=dict(
            assigner=dict(
                type='HungarianAssigner',
                match_costs=[
                    dict(type='ClassificationCost', weight=1.),
                    dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                    dict(type='IoUCost', iou_mode='giou', weight=2.0)
                ])),
        test_cfg=dict(max_per_img=5))
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def deformable_detr_cfg(type='DeformableDETR', num_levels=2, embed_dims=EMBED, **kwargs):
    """A 2+2-layer Deformable-DETR of width 32 on quarter-width ResNet-18 C4/C5, 6 queries.

    (mmdet's two-stage proposal embedding is hard-wired to 256 channels: pass
    ``embed_dims=256`` with ``as_two_stage=True``.)
    """
    cfg = dict(
        type=type,
        num_queries=6,
        num_feature_levels=num_levels,
        with_box_refine=False,
        as_two_stage=False,
        data_preprocessor=PREPROCESSOR,
        backbone=dict(BACKBONE, out_indices=(2, 3)),
        neck=dict(type='ChannelMapper', in_channels=[64, 128], kernel_size=1,
                  out_channels=embed_dims, act_cfg=None, norm_cfg=dict(type='GN', num_groups=8),
                  num_outs=num_levels),
        encoder=dict(
            num_layers=2,
            layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, num_levels=num_levels,
                                   num_points=2, batch_first=True),
                ffn_cfg=_ffn(embed_dims))),
        decoder=dict(
            num_layers=2,
            return_intermediate=True,
            layer_cfg=dict(
                self_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, dropout=0.0,
                                   batch_first=True),
                cross_attn_cfg=dict(embed_dims=embed_dims, num_heads=4, num_levels=num_levels,
                                    num_points=2, batch_first=True),
                ffn_cfg=_ffn(embed_dims)),
            post_norm_cfg=None),
        positional_encoding=dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5),
        bbox_head=dict(
            type='DeformableDETRHead',
            num_classes=3,
            embed_dims=embed_dims,
            sync_cls_avg_factor=True,
            loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                          loss_weight=2.0),
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
        test_cfg=dict(max_per_img=6))
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def build(cfg):
    """Build a detector (mmdet or mmposenc type) under mmdet's default scope."""
    from mmdet.utils import register_all_modules
    from mmengine.logging import MMLogger
    from mmengine.registry import DefaultScope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    register_all_modules(init_default_scope=False)
    name = f'mmposenc-test-{id(cfg)}'
    with DefaultScope.overwrite_default_scope('mmdet'):
        if not DefaultScope.check_instance_created(name):
            DefaultScope.get_instance(name, scope_name='mmdet')
        model = MODELS.build(cfg)
    # DeformableDETR.level_embed is torch.Tensor(...) (uninitialised memory) until now;
    # mmengine logs every parameter's initialisation: keep that out of the test output
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    return model


def packed_inputs(shapes, num_items=None, seed=0):
    """mmdet demo inputs: uint8 images of ``shapes`` [(3, h, w), ...] with random boxes."""
    from mmdet.testing import demo_mm_inputs
    torch.manual_seed(seed)
    return demo_mm_inputs(len(shapes), image_shapes=shapes, num_items=num_items, num_classes=3)


def randomise_pegs(model, seed=0):
    """Non-trivial PEG weights and BN running statistics (eval mode then tests something)."""
    gen = torch.Generator().manual_seed(seed)
    for m in model.encoder.pegs.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.weight.data.normal_(0, 0.5, generator=gen)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5, generator=gen)
            m.bias.data.normal_(0, 0.5, generator=gen)
            m.running_mean.normal_(0, 0.5, generator=gen)
            m.running_var.uniform_(0.5, 2.0, generator=gen)
    return model


def samples_on_grid(img_shapes, batch_shape, stride=32):
    """Data samples of images of ``img_shapes`` (h, w) feature cells of ``stride`` pixels, padded
    to ``batch_shape`` cells: ``pre_transformer`` then builds the masks of that padding."""
    from mmdet.structures import DetDataSample
    samples = []
    for h, w in img_shapes:
        s = DetDataSample()
        s.set_metainfo(dict(img_shape=(h * stride, w * stride),
                            batch_input_shape=(batch_shape[0] * stride,
                                               batch_shape[1] * stride)))
        samples.append(s)
    return samples
