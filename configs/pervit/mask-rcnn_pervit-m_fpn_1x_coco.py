# Mask R-CNN + FPN with PerViT-M: the PerViT-T recipe with the M backbone (beyond the paper).
_base_ = ['./mask-rcnn_pervit-t_fpn_1x_coco.py']

pretrained = 'checkpoints/pervit-medium_in1k_mmposenc.pth'

model = dict(
    backbone=dict(
        arch='medium',  # PerViT
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[468, 540, 684, 684]))  # FPN
