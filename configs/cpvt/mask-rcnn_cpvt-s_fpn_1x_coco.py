# Mask R-CNN + FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, 1x: mmdet's recipe for
# a transformer backbone (mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: AdamW lr 1e-4,
# weight decay 0.05, no decay on norms). The outputs of layers 2, 5, 8 and 11 (stride 16) are
# rescaled to strides 4/8/16/32 by mmposenc.SimplePyramid (BEiT / ViTDet style) before FPN.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models', 'mmposenc.models.detectors'],
                      allow_failed_imports=False)

# Padding-exact mode on (issue 20): each image of a padded batch gets the boxes, scores, labels
# and masks it gets alone (CPVT, SimplePyramid, FPN and RPN keep to the image's own cells, the
# RoI heads read each image's maps edge-replicated into the padding). Measured cost, exact /
# stock in one process (tools/benchmark/padding_exact_cost.py --configs this file --clock cpu
# --threads 1 --repeats 3 --warmup 0, two COCO128 images at 800 x 1067 + 800 x 1202): train
# step 1.001 (repetitions 1.064, 1.001, 0.995), predict 1.025 (1.025, 1.006, 1.046): within 3 %
# by the medians. The one switch: model = dict(padding_exact=False) in your config is mmdet's
# Mask R-CNN / FPN / RPNHead with the stock CPVT and SimplePyramid, bit for bit (same state
# dict: checkpoints load both ways).
embed_dims = 384
model = dict(
    # mmdet's MaskRCNN binding each image's size for the backbone, handing SimplePyramid and
    # MaskedFPN the padding masks of their inputs and the RoI heads edge-replicated maps
    type='mmposenc.PaddingExactMaskRCNN',
    backbone=dict(
        _delete_=True,
        type='mmposenc.CPVT',  # CPVT
        arch='small',
        padding_exact=True,  # False: the stock computation, padding seen as image
        # PEGs after layers 0-4, as CPVT-S-GAP (cpvt-small-gap_4xb256_in1k.py); for a
        # checkpoint of cpvt-small_4xb256_in1k.py (one PEG) set peg_positions=(0, )
        peg_positions=(0, 1, 2, 3, 4),
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        drop_path_rate=0.1,
        # ImageNet weights: the checkpoint tools/train.py writes for cpvt-small-gap_4xb256_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/cpvt-small-gap_4xb256_in1k/epoch_300.pth')),
    neck=[
        dict(type='mmposenc.SimplePyramid', in_channels=embed_dims,
             scales=(4, 2, 1, 0.5),  # strides 16 -> 4, 8, 16, 32
             padding_exact=True),
        # mmdet's FPN (same arguments) on each image's cells
        dict(type='mmposenc.MaskedFPN', in_channels=[embed_dims] * 4, out_channels=256,
             num_outs=5),
    ],
    rpn_head=dict(type='mmposenc.PaddingExactRPNHead'))  # mmdet's RPNHead, likewise

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(
        # the Swin base names 'absolute_pos_embed', 'relative_position_bias_table' and 'norm',
        # none of which is a CPVT parameter name (its norms are ln1/ln2): norms by type instead
        _delete_=True,
        norm_decay_mult=0.0,
        custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # CPVT.pegs

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
