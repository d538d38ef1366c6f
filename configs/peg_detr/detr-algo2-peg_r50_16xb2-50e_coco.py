# DETR w/o PE + PEG with the PEG masked as CPVT's own snippet does ([E] supplementary B.2,
# Algorithm 2): the convolution reads the raw padded tokens and BatchNorm takes the statistics of
# all positions, only the padded tokens are put back. The ablation of
# detr-peg_r50_16xb2-50e_coco.py, whose MaskedPEG zeroes the padding first and normalises over
# valid tokens only (each image's valid tokens then do not depend on the padding of its batch).
# Not a row of the paper.
_base_ = './detr-peg_r50_16xb2-50e_coco.py'

model = dict(peg_cfg=dict(masking='paper'))
