# Mask R-CNN + FPN with PVT-Tiny + PEG (+GAP-pretrained), 1x: the recipe of the baseline
# mask-rcnn_pvt-t_fpn_1x_coco.py beside this file with the backbone swapped.
_base_ = ['mask-rcnn_pvt-t_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: mmdet's MaskRCNN / FPN / RPNHead as mmdet ships them.
# With the exact classes (mmposenc.PaddingExactMaskRCNN, MaskedFPN, PaddingExactRPNHead,
# backbone padding_exact=True) exact / stock measured predict 1.075 (two COCO128 images at
# 1333 x 800, CPU time, tools/benchmark/padding_exact_cost.py --configs this file): above 3 %.
# How to turn it on: README.md beside this file.

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PVTPEG',  # PVTPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        # ImageNet weights: the checkpoint tools/train.py writes for pvt-peg-tiny_8xb128_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pvt-peg-tiny_8xb128_in1k/epoch_300.pth')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # PVTPEG.pegs
