# PerViT-S: the PerViT-T recipe with stochastic depth 0.1 and weight decay 0.05 (Table A6).
_base_ = ['./pervit-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(arch='small', drop_path_rate=0.1),  # PerViT
    head=dict(in_channels=464))

optim_wrapper = dict(optimizer=dict(weight_decay=0.05))
