# Mask R-CNN + FPN with Swin-T + PEG (+GAP-pretrained), 1x: mmdet's Swin-T Mask R-CNN recipe
# (mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py: AdamW lr 1e-4, weight decay 0.05, no
# decay on norms and relative position bias) with the backbone swapped. Baseline: that config.
_base_ = ['mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: mmdet's MaskRCNN / FPN / RPNHead as mmdet ships them.
# With the exact classes (mmposenc.PaddingExactMaskRCNN, MaskedFPN, PaddingExactRPNHead,
# backbone padding_exact=True) exact / stock measured train step 1.043, predict 1.116 (two
# COCO128 images at 1333 x 800, CPU time, tools/benchmark/padding_exact_cost.py --configs this
# file): above 3 %. How to turn it on: README.md beside this file.

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        # ImageNet weights: the checkpoint tools/train.py writes for swin-peg-tiny_16xb64_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/swin-peg-tiny_16xb64_in1k/epoch_300.pth')))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={
        # mmdet's base also names 'absolute_pos_embed', which SwinPEG does not have
        '_delete_': True,
        'relative_position_bias_table': dict(decay_mult=0.0),
        'norm': dict(decay_mult=0.0),
        'backbone.pegs': dict(decay_mult=0.0),  # SwinPEG.pegs
    }))

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
