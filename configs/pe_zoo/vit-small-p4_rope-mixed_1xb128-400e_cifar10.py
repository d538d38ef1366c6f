# Position-encoding zoo on CIFAR-10 (ViT-S, patch 4, 32 x 32): RoPE-Mixed (Heo et al., "Rotary
# Position Embedding for Vision Transformer", ECCV 2024) instead of the absolute embedding: the
# queries and keys of the patch tokens are rotated by learnt per-layer, per-head 2D frequencies;
# the class token is not rotated. Initialisation as the paper's code (theta 10, a random direction
# per head and layer); the frequencies are kept out of weight decay as there.
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=dict(  # mmposenc.models.layers.RoPEMixed
        _delete_=True, type='mmposenc.RoPEMixed', theta=10.0, rotate=True)))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
        '.freqs': dict(decay_mult=0.0),  # RoPEMixed.freqs
    }))
