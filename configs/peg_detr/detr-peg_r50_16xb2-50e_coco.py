# DETR w/o PE + PEG: the row of CPVT [E] Table 4 (33.9 AP): the encoder's sine encoding is
# replaced by a masked PEG (depthwise 3x3 conv + BN + ReLU, added to the tokens, Algorithm 2)
# after the first encoder layer.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    encoder_pos='peg',
    peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
    peg_cfg=dict(type='mmposenc.MaskedPEG', kernel_size=3))
