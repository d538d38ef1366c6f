# CPVT-S: DeiT-S (384 dims, 6 heads, 12 layers) with one PEG after encoder layer 0.
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(arch='small'), head=dict(in_channels=384))
