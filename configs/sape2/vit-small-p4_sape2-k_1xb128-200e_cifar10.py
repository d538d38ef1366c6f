# SaPE2 in K mode: the keys (not the queries) meet the integer-position embeddings.
_base_ = ['vit-small-p4_sape2-q_1xb128-200e_cifar10.py']

model = dict(backbone=dict(pos_encoding=dict(mode='k')))
