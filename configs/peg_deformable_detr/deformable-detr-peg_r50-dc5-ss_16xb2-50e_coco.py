# Deformable-DETR single-scale on dilated C5 (DC5, stride 16), w/o PE + PEG: CPVT [E] Table 4
# row "DD-DC5 w/o PE + PEG" (41.9). Deformable-DETR's own recipe.
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: a MultiLevelMaskedPEG (3x3, one per level) after encoder
    # layer 0 (peg_after=(0, )); options go in the mode's value, e.g.
    # encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and are replaced with it:
    # --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg',
    level_embed=True,
    num_feature_levels=1,
    backbone=dict(
        out_indices=(3, ), strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2)),
    neck=dict(in_channels=[2048], num_outs=1),  # MaskedChannelMapper
    encoder=dict(layer_cfg=dict(self_attn_cfg=dict(num_levels=1))),
    decoder=dict(layer_cfg=dict(cross_attn_cfg=dict(num_levels=1))))
