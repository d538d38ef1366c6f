# SaPE2 (Q) on CIFAR-10: the queries, not the keys, meet the position tables (Eq. 12).
_base_ = ['vit-small-p4_sape2-k_1xb128-400e_cifar10.py']

model = dict(backbone=dict(pos_encoding=dict(mode='q')))
