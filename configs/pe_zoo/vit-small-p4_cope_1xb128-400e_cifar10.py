# Position-encoding zoo on CIFAR-10 (ViT-S, patch 4, 32 x 32): contextual position encoding
# (bidirectional, raster order).
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar10.py']

model = dict(backbone=dict(pos_encoding=dict(_delete_=True, type='mmposenc.CoPE')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
        '.pos_embed': dict(decay_mult=0.0),
    }))
