# Semantic FPN with PerViT-M: the PerViT-T recipe with the M backbone (beyond the paper).
_base_ = ['./fpn_pervit-t_8xb4-80k_ade20k-512x512.py']

pretrained = 'checkpoints/pervit-medium_in1k_mmposenc.pth'

model = dict(
    backbone=dict(
        arch='medium',  # PerViT
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[468, 540, 684, 684]))  # FPN
