# Deformable-DETR (4 levels) with the sine encoding of the encoder replaced by a masked PEG per
# feature level after the first encoder layer. Beyond the paper: CPVT [E] Table 4 runs DD
# single-scale only ("for DD, we always use single scale").
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    encoder_pos='peg',
    level_embed=True,
    peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
    peg_cfg=dict(
        type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False))
