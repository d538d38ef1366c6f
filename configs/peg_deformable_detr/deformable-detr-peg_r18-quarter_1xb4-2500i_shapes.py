# The demo with the sine encoding of the encoder replaced by a masked PEG per level after the
# first encoder layer (CPVT Table 4 "DD w/o PE + PEG"). Everything else is identical to
# deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py.
_base_ = './deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py'

model = dict(
    encoder_pos='peg',
    level_embed=True,
    peg_after=(0, ),
    peg_cfg=dict(type='mmposenc.MultiLevelMaskedPEG', kernel_size=3))
