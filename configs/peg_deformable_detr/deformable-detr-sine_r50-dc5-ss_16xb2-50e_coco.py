# Deformable-DETR single-scale on dilated C5 (DC5, stride 16) with its sine encoding, the
# "DD-DC5 [51]" row of CPVT [E] Table 4 (41.5, quoted from the Deformable-DETR paper).
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    encoder_pos='sine',
    num_feature_levels=1,
    backbone=dict(
        out_indices=(3, ), strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2)),
    neck=dict(in_channels=[2048], num_outs=1),  # MaskedChannelMapper
    encoder=dict(layer_cfg=dict(self_attn_cfg=dict(num_levels=1))),
    decoder=dict(layer_cfg=dict(cross_attn_cfg=dict(num_levels=1))))
