# DINO-4scale-R50 with the encoder's sine encoding replaced by a masked PEG per feature level
# after the first encoder layer (CPVT's "DD w/o PE + PEG" applied to DINO); the learnt level
# embedding stays, and the decoder's anchor-box query positions are DINO's own. Beyond both
# papers.
_base_ = './dino-4scale-sine_r50_8xb2-12e_coco.py'

model = dict(
    encoder_pos='peg',
    level_embed=True,
    peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
    peg_cfg=dict(
        type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False))
