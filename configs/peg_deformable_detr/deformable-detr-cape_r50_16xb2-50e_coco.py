# Deformable-DETR with CAPE in the encoder (CAPE, Likhomanenko et al. 2021, arXiv:2106.03143; the
# CAPE paper has no detection experiments): the sine encoding of every level is replaced by
# CAPE2d of that level's grid with its own padding mask (each image's valid region scaled to
# [-1, 1], so all levels share one frame), plus the learnt level embedding as with the sine.
# Same recipe as the sine config (the Deformable-DETR paper's).
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: mmposenc.CAPE2d with the paper's ViT augmentation
    # (max_global_shift=0.5, max_local_shift='auto' = 1 / N per axis for N valid tokens along
    # it, max_global_scaling=1.4); other options go in the mode's value, e.g.
    # encoder_pos=dict(mode='cape', cape_cfg=dict(type='mmposenc.CAPE2d', max_global_scaling=1.))
    encoder_pos='cape',
    level_embed=True)
