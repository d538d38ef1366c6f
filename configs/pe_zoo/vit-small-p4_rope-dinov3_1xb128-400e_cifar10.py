# Position-encoding zoo on CIFAR-10 (ViT-S, patch 4, 32 x 32): the DINOv3-style RoPE (Simeoni et
# al. 2025, arXiv:2508.10104; facebookresearch/dinov3 RopePositionEmbedding) instead of the
# absolute embedding: axial rotation of the patch queries and keys by coordinates normalised to
# [-1, 1] per axis, base 100; in training the coordinates are rescaled by a log-uniform factor in
# [1/2, 2] (DINOv3's recipes; shift and jitter off as there). No parameters.
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=dict(  # mmposenc.models.layers.DINOv3RoPE
        _delete_=True, type='mmposenc.DINOv3RoPE', base=100.0, normalize_coords='separate',
        shift_coords=None, jitter_coords=None, rescale_coords=2.0)))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
    }))
