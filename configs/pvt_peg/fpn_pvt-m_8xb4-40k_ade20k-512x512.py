# Baseline without PEG: Semantic FPN, mmdet's PVT-Medium v1 with PVT's ImageNet weights.
_base_ = ['fpn_pvt-t_8xb4-40k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        num_layers=[3, 4, 18, 3],
        init_cfg=dict(checkpoint='https://github.com/whai362/PVT/'
                      'releases/download/v2/pvt_medium.pth')))
