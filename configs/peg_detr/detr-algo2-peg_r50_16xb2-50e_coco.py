# DETR w/o PE + PEG with the PEG masked as CPVT's own snippet does ([E] supplementary B.2,
# Algorithm 2): the convolution reads the raw padded tokens and BatchNorm takes the statistics of
# all positions, only the padded tokens are put back. The ablation of
# detr-peg_r50_16xb2-50e_coco.py, whose MaskedPEG zeroes the padding first and normalises over
# valid tokens only (each image's valid tokens then do not depend on the padding of its batch).
# Not a row of the paper.
_base_ = './detr-peg_r50_16xb2-50e_coco.py'

# The options go with the mode (_delete_: the base's encoder_pos is the string 'peg'), so that
# --cfg-options model.encoder_pos=sine replaces them too.
model = dict(
    encoder_pos=dict(
        _delete_=True,
        mode='peg',
        peg_cfg=dict(type='mmposenc.MaskedPEG', kernel_size=3, masking='paper')))
