# Position-encoding zoo on CIFAR-10 (ViT-S, patch 4, 32 x 32): axial 2D rotary embedding of
# queries and keys instead of the absolute embedding (SaPE2 Table 1, "2D RoPE").
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar10.py']

model = dict(backbone=dict(pos_encoding=dict(_delete_=True, type='mmposenc.RoPE2d')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
    }))
