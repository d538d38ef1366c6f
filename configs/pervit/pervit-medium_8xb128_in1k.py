# PerViT-M: the PerViT-T recipe with stochastic depth 0.2, weight decay 0.05 and 20 warm-up
# epochs (Table A6; Appendix F: "smaller warmup epoch did not converge").
_base_ = ['./pervit-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(arch='medium', drop_path_rate=0.2),  # PerViT
    head=dict(in_channels=684))

optim_wrapper = dict(optimizer=dict(weight_decay=0.05))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, begin=0, end=20,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=20, end=300)
]
