# Deformable-DETR (4 levels) with a masked PEG in its encoder (configs/peg_deformable_detr) on
# PVT-Small + PEG + GAP, 50 epochs: the PEG backbone in the PEG detector, padding-exact end to end
# (issue 20): PVTPEG in its padding-exact mode, exact padding masks, the padding-aware neck and
# mmposenc.PEGDeformableDETR: an image gets the same scores and boxes alone and in any padded
# batch (tests/test_detectors/test_detr_family_batch_exact.py). mmdet's Deformable-DETR recipe
# unchanged (AdamW lr 2e-4, backbone lr x0.1, 50 epochs, 16 GPUs x 2 images). Beyond every paper.
_base_ = ['../peg_deformable_detr/deformable-detr-peg_r50_16xb2-50e_coco.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PVTPEG',  # PVTPEG
        arch='small',
        out_indices=(1, 2, 3),  # strides 8 / 16 / 32; the neck adds stride 64
        drop_path_rate=0.1,
        # each image of a padded batch gets the maps it gets alone; False is PVT + PEG without
        # it (same state dict either way)
        padding_exact=True,
        # ImageNet weights: the checkpoint tools/train.py writes for pvt-peg-small_8xb128_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/pvt-peg-small_8xb128_in1k/epoch_300.pth')),
    neck=dict(in_channels=[128, 320, 512]))  # MaskedChannelMapper

# mmdet's parameter groups, plus no weight decay on the backbone's PEGs (as the PVTPEG RetinaNets)
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={
    'backbone.pegs': dict(lr_mult=0.1, decay_mult=0.0)}))
