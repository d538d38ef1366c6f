# Deformable-DETR w/o PE + PEG (CPVT Table 4): the sine encoding of the encoder is replaced by
# a masked PEG per feature level after the first encoder layer.
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    encoder_pos='peg',
    level_embed=True,
    peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
    peg_cfg=dict(
        type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False))
