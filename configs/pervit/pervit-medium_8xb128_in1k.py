# PerViT-M: the PerViT-T recipe with stochastic depth 0.2 (Table A6).
_base_ = ['./pervit-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.2),  # PerViT
    head=dict(in_channels=684))
