# RetinaNet + FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, 1x: PVT's RetinaNet recipe
# (mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py: AdamW lr 1e-4, weight decay 1e-4). CPVT is a
# plain ViT with one stride-16 map per layer: the outputs of layers 5, 8 and 11 are rescaled
# to strides 8/16/32 by mmposenc.SimplePyramid (BEiT / ViTDet style) before mmdet's FPN, which
# adds P6/P7 as for ResNet. No class token: checkpoints of cpvt-small-gap_4xb256_in1k.py load
# as they are, those of cpvt-small_4xb256_in1k.py with peg_positions=(0, ) (cls_token unused).
_base_ = ['mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: mmdet's RetinaNet / FPN / RetinaHead as mmdet ships them.
# With the exact classes (mmposenc.PaddingExactRetinaNet, MaskedFPN, PaddingExactRetinaHead,
# backbone padding_exact=True) exact / stock measured predict 1.048 (two COCO128 images at
# 1333 x 800, CPU time, tools/benchmark/padding_exact_cost.py --configs this file): above 3 %.
# How to turn it on: README.md beside this file.

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
        out_indices=(5, 8, 11),
        drop_path_rate=0.1,
        # ImageNet weights: the checkpoint tools/train.py writes for cpvt-small-gap_4xb256_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/cpvt-small-gap_4xb256_in1k/epoch_300.pth')),
    neck=[
        dict(type='mmposenc.SimplePyramid', in_channels=embed_dims,
             scales=(2, 1, 0.5)),  # strides 16 -> 8, 16, 32
        dict(type='FPN', in_channels=[embed_dims] * 3, out_channels=256, start_level=0,
             add_extra_convs='on_input', num_outs=5),  # P3-P7 of RetinaNet
    ])

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # CPVT.pegs

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
