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
# BACKBONE's four outputs (out_indices=(0, 1, 2, 3)) as Mask2Former's head and pixel decoder
# take them
C2_TO_C5 = dict(in_channels=[16, 32, 64, 128], strides=[4, 8, 16, 32])


def _ffn(dims=EMBED):
    return dict(embed_dims=dims, feedforward_channels=2 * dims, num_fcs=2, ffn_drop=0.0,
                act_cfg=dict(type='ReLU', inplace=True))


def _mha(dims=EMBED, num_heads=4):
    """nn.MultiheadAttention of DETR's layers and Mask2Former's transformer decoder."""
    return dict(embed_dims=dims, num_heads=num_heads, dropout=0.0, batch_first=True)


def _msda(dims, num_levels, **kwargs):
    """Multi-scale deformable attention, 4 heads and 2 sampling points per head and level."""
    return dict(embed_dims=dims, num_heads=4, num_levels=num_levels, num_points=2,
                batch_first=True, **kwargs)


def _box_train_cfg(cls_cost):
    """DETR's Hungarian matching: ``cls_cost`` + L1 (5) + GIoU (2) box costs."""
    return dict(assigner=dict(
        type='HungarianAssigner',
        match_costs=[
            cls_cost,
            dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
            dict(type='IoUCost', iou_mode='giou', weight=2.0)
        ]))


FOCAL_ASSIGNER = _box_train_cfg(dict(type='FocalLossCost', weight=2.0))


def _focal_head(type, num_classes=3, embed_dims=EMBED, **kwargs):
    return dict(
        type=type, num_classes=num_classes, embed_dims=embed_dims,
        loss_cls=dict(type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=2.0),
        loss_bbox=dict(type='L1Loss', loss_weight=5.0),
        loss_iou=dict(type='GIoULoss', loss_weight=2.0), **kwargs)


def detr_cfg(type='DETR', **kwargs):
    """A 2+2-layer DETR of width 32 on a quarter-width ResNet-18 C5, 5 queries, 3 classes."""
    cfg = dict(
        type=type,
        num_queries=5,
        data_preprocessor=PREPROCESSOR,
        backbone=BACKBONE,
        neck=dict(type='ChannelMapper', in_channels=[128], kernel_size=1,
                  out_channels=EMBED, act_cfg=None, norm_cfg=None, num_outs=1),
        encoder=dict(num_layers=2, layer_cfg=dict(self_attn_cfg=_mha(), ffn_cfg=_ffn())),
        decoder=dict(
            num_layers=2,
            layer_cfg=dict(self_attn_cfg=_mha(), cross_attn_cfg=_mha(), ffn_cfg=_ffn()),
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
        train_cfg=_box_train_cfg(dict(type='ClassificationCost', weight=1.)),
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
            layer_cfg=dict(self_attn_cfg=_msda(embed_dims, num_levels),
                           ffn_cfg=_ffn(embed_dims))),
        decoder=dict(
            num_layers=2,
            return_intermediate=True,
            layer_cfg=dict(self_attn_cfg=_mha(embed_dims),
                           cross_attn_cfg=_msda(embed_dims, num_levels),
                           ffn_cfg=_ffn(embed_dims)),
            post_norm_cfg=None),
        positional_encoding=dict(num_feats=embed_dims // 2, normalize=True, offset=-0.5),
        bbox_head=_focal_head('DeformableDETRHead', embed_dims=embed_dims,
                              sync_cls_avg_factor=True),
        train_cfg=FOCAL_ASSIGNER,
        test_cfg=dict(max_per_img=6))
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def _build(cfg, scope, name, register_all_modules):
    """Build ``cfg`` from mmposenc's registry under ``scope`` (mmdet or mmseg) as the default
    scope, then initialise its weights with mmengine's per-parameter log silenced."""
    from mmengine.logging import MMLogger
    from mmengine.registry import DefaultScope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope(scope):
        if not DefaultScope.check_instance_created(name):
            DefaultScope.get_instance(name, scope_name=scope)
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


def build(cfg):
    """Build a detector (mmdet or mmposenc type) under mmdet's default scope."""
    from mmdet.utils import register_all_modules
    return _build(cfg, 'mmdet', f'mmposenc-test-{id(cfg)}', register_all_modules)


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


def conditional_detr_cfg(type='ConditionalDETR', **kwargs):
    """A 2+2-layer Conditional-DETR on a quarter-width ResNet-18 C5 (width 256: mmdet's
    conditional spatial query is a 256-channel sine of the reference points)."""
    dims = 256
    cfg = detr_cfg(type=type)
    cfg['neck'].update(out_channels=dims)
    cfg['encoder']['layer_cfg'] = dict(self_attn_cfg=_mha(dims, num_heads=8), ffn_cfg=_ffn(dims))
    cfg['decoder']['layer_cfg'] = dict(
        self_attn_cfg=dict(embed_dims=dims, num_heads=8, attn_drop=0.0, cross_attn=False),
        cross_attn_cfg=dict(embed_dims=dims, num_heads=8, attn_drop=0.0, cross_attn=True),
        ffn_cfg=_ffn(dims))
    cfg.update(positional_encoding=dict(num_feats=dims // 2, normalize=True),
               bbox_head=_focal_head('ConditionalDETRHead', embed_dims=dims),
               train_cfg=copy.deepcopy(FOCAL_ASSIGNER))
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def dab_detr_cfg(type='DABDETR', **kwargs):
    """A 2+2-layer DAB-DETR of width 32 on a quarter-width ResNet-18 C5, 5 queries."""
    cfg = detr_cfg(type=type, with_random_refpoints=False, num_patterns=0)
    cfg['decoder'] = dict(
        num_layers=2,
        query_dim=4,
        query_scale_type='cond_elewise',
        with_modulated_hw_attn=True,
        layer_cfg=dict(
            self_attn_cfg=dict(embed_dims=EMBED, num_heads=4, attn_drop=0.0, proj_drop=0.0,
                               cross_attn=False),
            cross_attn_cfg=dict(embed_dims=EMBED, num_heads=4, attn_drop=0.0, proj_drop=0.0,
                                cross_attn=True),
            ffn_cfg=_ffn()),
        return_intermediate=True)
    cfg.update(positional_encoding=dict(num_feats=EMBED // 2, temperature=20, normalize=True),
               bbox_head=_focal_head('DABDETRHead'),
               train_cfg=copy.deepcopy(FOCAL_ASSIGNER))
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def dino_cfg(type='DINO', num_levels=2, **kwargs):
    """A 2+2-layer DINO on quarter-width ResNet-18 C4/C5, 6 queries, 4 denoising queries
    (width 256: mmdet's DINO decoder encodes the anchor boxes in 256 channels)."""
    dims = 256
    cfg = deformable_detr_cfg(type=type, num_levels=num_levels, embed_dims=dims,
                              with_box_refine=True, as_two_stage=True)
    cfg['encoder']['layer_cfg']['self_attn_cfg'].update(num_heads=8)
    cfg['decoder']['layer_cfg']['self_attn_cfg'].update(num_heads=8)
    cfg['decoder']['layer_cfg']['cross_attn_cfg'].update(num_heads=8)
    cfg.update(positional_encoding=dict(num_feats=dims // 2, normalize=True, offset=0.0,
                                        temperature=20),
               bbox_head=_focal_head('DINOHead', embed_dims=dims, sync_cls_avg_factor=True),
               dn_cfg=dict(label_noise_scale=0.5, box_noise_scale=1.0,
                           group_cfg=dict(dynamic=True, num_groups=None, num_dn_queries=4)),
               train_cfg=copy.deepcopy(FOCAL_ASSIGNER))
    cfg['bbox_head'].pop('embed_dims')  # DINOHead takes it from the detector
    cfg.update(kwargs)
    return copy.deepcopy(cfg)


def pixel_decoder_cfg(type='MSDeformAttnPixelDecoder', feat_channels=EMBED, **kwargs):
    """Mask2Former's pixel decoder for a quarter-width ResNet-18 (strides 4-32), width 32,
    2 encoder layers over the last 3 levels."""
    from mmengine.config import ConfigDict
    cfg = dict(
        type=type,
        **C2_TO_C5,
        feat_channels=feat_channels,
        out_channels=feat_channels,
        num_outs=3,
        norm_cfg=dict(type='GN', num_groups=8),
        act_cfg=dict(type='ReLU'),
        encoder=dict(
            num_layers=2,
            layer_cfg=dict(self_attn_cfg=_msda(feat_channels, 3, dropout=0.0),
                           ffn_cfg=_ffn(feat_channels))),
        positional_encoding=dict(num_feats=feat_channels // 2, normalize=True))
    cfg.update(kwargs)
    return ConfigDict(copy.deepcopy(cfg))


def mask2former_head_cfg(type='Mask2FormerHead', pixel_decoder=None, num_things=3,
                         num_stuff=1, **kwargs):
    """Mask2Former's head of width 32: the tiny pixel decoder, 2 transformer-decoder layers,
    5 queries."""
    num_classes = num_things + num_stuff
    cfg = dict(
        type=type,
        **C2_TO_C5,
        feat_channels=EMBED,
        out_channels=EMBED,
        num_queries=5,
        num_transformer_feat_level=3,
        pixel_decoder=pixel_decoder if pixel_decoder is not None else pixel_decoder_cfg(),
        enforce_decoder_input_project=False,
        positional_encoding=dict(num_feats=EMBED // 2, normalize=True),
        transformer_decoder=dict(
            return_intermediate=True,
            num_layers=2,
            layer_cfg=dict(self_attn_cfg=_mha(), cross_attn_cfg=_mha(), ffn_cfg=_ffn()),
            init_cfg=None),
        loss_cls=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=2.0,
                      reduction='mean', class_weight=[1.0] * num_classes + [0.1]),
        loss_mask=dict(type='CrossEntropyLoss', use_sigmoid=True, reduction='mean',
                       loss_weight=5.0),
        loss_dice=dict(type='DiceLoss', use_sigmoid=True, activate=True, reduction='mean',
                       naive_dice=True, eps=1.0, loss_weight=5.0))
    if 'Seg' in type:
        cfg.update(num_classes=num_classes)
        for key in ('loss_cls', 'loss_mask', 'loss_dice'):
            cfg[key]['type'] = 'mmdet.' + cfg[key]['type']
    else:
        cfg.update(num_things_classes=num_things, num_stuff_classes=num_stuff)
    cfg.update(kwargs)
    from mmengine.config import ConfigDict
    return ConfigDict(copy.deepcopy(cfg))


def _mask_train_cfg(scope=''):
    """Mask2Former's point-sampled Hungarian matching (mmdet types; ``scope='mmdet.'`` from
    mmseg)."""
    return dict(
        num_points=64, oversample_ratio=3.0, importance_sample_ratio=0.75,
        assigner=dict(type=scope + 'HungarianAssigner', match_costs=[
            dict(type=scope + 'ClassificationCost', weight=2.0),
            dict(type=scope + 'CrossEntropyLossCost', weight=5.0, use_sigmoid=True),
            dict(type=scope + 'DiceCost', weight=5.0, pred_act=True, eps=1.0)]),
        sampler=dict(type=scope + 'MaskPseudoSampler'))


def mask2former_cfg(head_type='Mask2FormerHead', decoder_type='MSDeformAttnPixelDecoder',
                    num_things=3, num_stuff=1, **decoder_kwargs):
    """mmdet's Mask2Former (instance + panoptic) of width 32 on a quarter-width ResNet-18."""
    cfg = dict(
        type='Mask2Former',
        data_preprocessor=dict(PREPROCESSOR, pad_mask=True, mask_pad_value=0, pad_seg=True,
                               seg_pad_value=255),
        backbone=dict(BACKBONE, out_indices=(0, 1, 2, 3)),
        panoptic_head=mask2former_head_cfg(
            head_type, pixel_decoder_cfg(decoder_type, **decoder_kwargs), num_things,
            num_stuff),
        panoptic_fusion_head=dict(type='MaskFormerFusionHead', num_things_classes=num_things,
                                  num_stuff_classes=num_stuff, loss_panoptic=None,
                                  init_cfg=None),
        train_cfg=_mask_train_cfg(),
        test_cfg=dict(panoptic_on=True, semantic_on=False, instance_on=True, max_per_image=5,
                      iou_thr=0.8, filter_low_score=True),
        init_cfg=None)
    from mmengine.config import ConfigDict
    return ConfigDict(copy.deepcopy(cfg))


def seg_mask2former_cfg(head_type='Mask2FormerHead',
                        decoder_type='mmdet.MSDeformAttnPixelDecoder', num_classes=4,
                        **decoder_kwargs):
    """mmseg's Mask2Former (EncoderDecoder) of width 32 on a quarter-width ResNet-18."""
    from mmengine.config import ConfigDict
    head = mask2former_head_cfg(head_type if head_type != 'Mask2FormerHead' else
                                'SegMask2FormerHead',
                                pixel_decoder_cfg(decoder_type, **decoder_kwargs),
                                num_things=num_classes, num_stuff=0)
    head['type'] = head_type
    head.update(
        align_corners=False,
        train_cfg=_mask_train_cfg(scope='mmdet.'))
    cfg = dict(
        type='EncoderDecoder',
        data_preprocessor=dict(type='SegDataPreProcessor', mean=PREPROCESSOR['mean'],
                               std=PREPROCESSOR['std'], bgr_to_rgb=True, pad_val=0,
                               seg_pad_val=255, size_divisor=1),
        backbone=dict(BACKBONE, type='mmdet.ResNet', out_indices=(0, 1, 2, 3)),
        decode_head=head,
        train_cfg=dict(),
        test_cfg=dict(mode='whole'))
    return ConfigDict(copy.deepcopy(cfg))


def build_seg(cfg):
    """Build an mmseg segmentor (mmseg or mmposenc types) under mmseg's default scope."""
    from mmseg.utils import register_all_modules
    return _build(cfg, 'mmseg', f'mmposenc-seg-test-{id(cfg)}', register_all_modules)


def seg_inputs(shapes, num_classes=4, seed=0):
    """Packed mmseg inputs: uint8 images of ``shapes`` [(3, h, w), ...] with random
    semantic maps of ``num_classes`` classes."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(seed)
    inputs, samples = [], []
    for c, h, w in shapes:
        inputs.append(torch.randint(0, 256, (c, h, w), generator=gen, dtype=torch.uint8))
        s = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w)))
        s.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, h, w), generator=gen))
        samples.append(s)
    return dict(inputs=inputs, data_samples=samples)
