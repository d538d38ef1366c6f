# Position-encoding zoo on CIFAR-10 (ViT-S, patch 4, 32 x 32): CoPE (ours bidirectional, over
# the raster order) on top of the learnable absolute embedding (compare SaPE2 Table 1,
# "CoPE + APE", whose CoPE is "the CoPE method from NLP" applied as is).
_base_ = ['vit-small-p4_abspos_1xb128-400e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=[
        dict(type='mmposenc.LearnableAbsolutePE'),  # added to the tokens
        dict(type='mmposenc.CoPE'),  # biases the logits
    ]))
