# Deformable-DETR (4 levels) with the sine encoding of the encoder replaced by a masked PEG per
# feature level after the first encoder layer. Beyond the paper: CPVT [E] Table 4 runs DD
# single-scale only ("for DD, we always use single scale").
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: a MultiLevelMaskedPEG (3x3, one per level) after encoder
    # layer 0 (peg_after=(0, )); options go in the mode's value, e.g.
    # encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and are replaced with it:
    # --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg',
    level_embed=True)
