# Position-encoding zoo on CIFAR-100 (ViT-S, patch 4, 32 x 32): axial 2D RoPE on top of the
# learnable absolute embedding (SaPE2 Table 1, "2D RoPE + APE").
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar100.py']

model = dict(
    backbone=dict(pos_encoding=[
        dict(type='mmposenc.LearnableAbsolutePE'),  # added to the tokens
        dict(type='mmposenc.RoPE2d'),  # rotates q and k
    ]))
