# Demo: the same small Deformable-DETR with the sine encoding of the encoder replaced by a
# masked PEG per level after the first encoder layer (CPVT "DD w/o PE + PEG").
# Everything else is identical to deformable-detr-sine_r18-half_1xb4-400i_shapes.py.
_base_ = './deformable-detr-sine_r18-half_1xb4-400i_shapes.py'

model = dict(
    # the mode with its defaults: a MultiLevelMaskedPEG (3x3, one per level) after encoder
    # layer 0 (peg_after=(0, )); options go in the mode's value, e.g.
    # encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and are replaced with it:
    # --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg',
    level_embed=True)
