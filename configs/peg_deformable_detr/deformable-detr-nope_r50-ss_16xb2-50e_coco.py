# Deformable-DETR single-scale (C5 only, stride 32) without any encoder position encoding.
# Not a row of CPVT [E] Table 4 (it has no "DD w/o PE"): the control of the PEG row.
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    encoder_pos='none',
    level_embed=True,
    num_feature_levels=1,
    backbone=dict(out_indices=(3, )),
    neck=dict(in_channels=[2048], num_outs=1),  # MaskedChannelMapper
    encoder=dict(layer_cfg=dict(self_attn_cfg=dict(num_levels=1))),
    decoder=dict(layer_cfg=dict(cross_attn_cfg=dict(num_levels=1))))
