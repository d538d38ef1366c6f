# Baseline without PEG: Semantic FPN, mmdet's PVT-Medium v1.
_base_ = ['fpn_pvt-t_8xb4-80k_ade20k-512x512.py']

model = dict(backbone=dict(num_layers=[3, 4, 18, 3]))
