# DETR w/o PE + PEG: the row of CPVT [E] Table 4 (33.9 AP): the encoder's sine encoding is
# replaced by a masked PEG (depthwise 3x3 conv + BN + ReLU, added to the tokens, Algorithm 2)
# after the first encoder layer.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: a MaskedPEG (3x3) after encoder layer 0 (peg_after=(0, ));
    # options go in the mode's value, e.g. encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and
    # are replaced with it: --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg')
