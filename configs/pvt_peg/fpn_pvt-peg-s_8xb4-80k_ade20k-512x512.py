# Semantic FPN, PVT-Small + PEG, ADE20K 512x512.
_base_ = ['fpn_pvt-peg-t_8xb4-80k_ade20k-512x512.py']

model = dict(backbone=dict(arch='small'))
