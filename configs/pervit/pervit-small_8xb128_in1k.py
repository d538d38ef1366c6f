# PerViT-S: the PerViT-T recipe with stochastic depth 0.1 (Table A6).
_base_ = ['./pervit-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1),  # PerViT
    head=dict(in_channels=464))
