# DINO-4scale-R50 with the encoder's sine encoding replaced by a masked PEG per feature level
# after the first encoder layer (CPVT's "DD w/o PE + PEG" applied to DINO); the learnt level
# embedding stays, and the decoder's anchor-box query positions are DINO's own. Beyond both
# papers.
_base_ = './dino-4scale-sine_r50_8xb2-12e_coco.py'

model = dict(
    # the mode with its defaults: a MultiLevelMaskedPEG (3x3, one per level) after encoder
    # layer 0 (peg_after=(0, )); options go in the mode's value, e.g.
    # encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and are replaced with it:
    # --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg',
    level_embed=True)
