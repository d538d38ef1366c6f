# SaPE2 (Q mode) combined with a learnable absolute position embedding.
_base_ = ['vit-small-p4_sape2-q_1xb128-200e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=[
        dict(type='mmposenc.LearnableAbsolutePE'),  # added to the tokens
        dict(type='mmposenc.SaPE2', mode='q', max_rel_pos=16),  # biases the logits
    ]))
