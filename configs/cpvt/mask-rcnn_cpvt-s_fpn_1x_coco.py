# Mask R-CNN + FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, 1x: mmdet's recipe for
# a transformer backbone (mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: AdamW lr 1e-4,
# weight decay 0.05, no decay on norms). The outputs of layers 2, 5, 8 and 11 (stride 16) are
# rescaled to strides 4/8/16/32 by mmposenc.SimplePyramid (BEiT / ViTDet style) before FPN.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

embed_dims = 384
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.CPVT',  # CPVT
        arch='small',
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
             scales=(4, 2, 1, 0.5)),  # strides 16 -> 4, 8, 16, 32
        dict(type='FPN', in_channels=[embed_dims] * 4, out_channels=256, num_outs=5),
    ])

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
