# DETR with CAPE in the encoder (CAPE, Likhomanenko et al. 2021, arXiv:2106.03143; the CAPE paper
# has no detection experiments): the encoder's 2D sine encoding is replaced by CAPE2d of each
# image's valid region (positions scaled to [-1, 1] per image, mean-normalised; in training a
# global shift, a local shift and a global scaling; plain formula at test time). The decoder
# cross-attention keeps the sine memory positions. Same CPVT 50-epoch recipe as the sine config.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: mmposenc.CAPE2d with the paper's ViT augmentation
    # (max_global_shift=0.5, max_local_shift='auto' = 1 / N per axis for N valid tokens along
    # it, max_global_scaling=1.4); other options go in the mode's value, e.g.
    # encoder_pos=dict(mode='cape', cape_cfg=dict(type='mmposenc.CAPE2d', max_global_scaling=1.))
    encoder_pos='cape')
