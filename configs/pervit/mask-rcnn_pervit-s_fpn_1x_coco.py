# Mask R-CNN + FPN with PerViT-S: the PerViT-T recipe with the S backbone (beyond the paper).
_base_ = ['./mask-rcnn_pervit-t_fpn_1x_coco.py']

pretrained = 'checkpoints/pervit-small_in1k_mmposenc.pth'

model = dict(
    backbone=dict(
        arch='small',  # PerViT
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=[320, 368, 464, 464]))  # FPN
