# RetinaNet + FPN with PVT-Tiny + PEG (+GAP-pretrained) backbone, 1x schedule (CPVT [L]
# Table 13: 38.7; PVT's detection setting). Compare with mmdet's own PVT-Tiny (absolute PE):
# mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py.
_base_ = ['mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: mmdet's RetinaNet / FPN / RetinaHead as mmdet ships them.
# With the exact classes (mmposenc.PaddingExactRetinaNet, MaskedFPN, PaddingExactRetinaHead,
# backbone padding_exact=True) exact / stock measured train step 1.079, predict 1.009 (two
# COCO128 images at 1333 x 800, CPU time, tools/benchmark/padding_exact_cost.py --configs this
# file): above 3 %. How to turn it on: README.md beside this file.

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PVTPEG',  # PVTPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        # ImageNet weights: the checkpoint tools/train.py writes for pvt-peg-tiny_8xb128_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pvt-peg-tiny_8xb128_in1k/epoch_300.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))  # FPN

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # PVTPEG.pegs

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
