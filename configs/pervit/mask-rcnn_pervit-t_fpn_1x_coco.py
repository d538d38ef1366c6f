# Mask R-CNN + FPN with a PerViT-T backbone, 1x schedule, COCO at mmdet's default 1333 x 800.
# Beyond the paper (PerViT reports ImageNet only): the Swin-T Mask R-CNN 1x recipe of mmdet's
# swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py (AdamW lr 1e-4, weight decay 0.05, 12 epochs,
# 8 x 2 images, linear warm-up, steps at 8 and 11). PerViT runs every stage at stride 16;
# `featmap_scales` resamples the four stage outputs to strides 4 / 8 / 16 / 32 for the FPN.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: mmdet's MaskRCNN / FPN / RPNHead as mmdet ships them.
# With the exact classes (mmposenc.PaddingExactMaskRCNN, MaskedFPN, PaddingExactRPNHead,
# backbone padding_exact=True) exact / stock measured predict 1.482 (two COCO128 images at
# 1333 x 800, CPU time, tools/benchmark/padding_exact_cost.py --configs this file): above 3 %.
# How to turn it on: README.md beside this file.

# an mmpretrain ImageClassifier checkpoint of ./pervit-tiny_8xb128_in1k.py (or the official
# weights converted by tools/model_converters/pervit_official_to_mmposenc.py)
pretrained = 'checkpoints/pervit-tiny_in1k_mmposenc.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PerViT',  # PerViT
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        featmap_scales=(4, 2, 1, 0.5),  # strides 4, 8, 16, 32
        # stochastic depth: the arch default of the ImageNet recipe (T 0, S 0.1, M 0.2)
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[192, 224, 280, 280]))  # FPN; PerViT.out_channels

# Swin's keys (absolute_pos_embed, relative_position_bias_table, norm) are replaced by
# PerViT's position encoding: the shared w_r (PerViT.distance_embed), every block's Phi_p
# projections and norms (PerViTBlock.attn.ppe) and the conditional position encoding
# (PerViTBlock.cpe); norms of the backbone, FPN and heads without decay as in the Swin recipe
optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(
        custom_keys=dict(
            _delete_=True,
            norm=dict(decay_mult=0.0),
            **{
                'backbone.distance_embed.': dict(decay_mult=0.0),
                '.attn.ppe.': dict(decay_mult=0.0),
                '.cpe.': dict(decay_mult=0.0),
            })))

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
