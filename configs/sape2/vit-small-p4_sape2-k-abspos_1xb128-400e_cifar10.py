# SaPE2 (K) + APE on CIFAR-10: the vanilla ViT's learnable absolute position embedding is kept
# and SaPE2 (K) biases every attention layer (SaPE2 Sec. 5.2, "*+APE").
_base_ = ['vit-small-p4_sape2-k_1xb128-400e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=[
        dict(type='mmposenc.LearnableAbsolutePE'),  # added to the tokens
        dict(type='mmposenc.SaPE2', mode='k', max_pos=16),  # biases the logits
    ]))
