# RetinaNet + FPN with Swin-T + PEG (+GAP-pretrained), 1x: mmdet's Swin-T RetinaNet recipe
# (mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py: stages 1-3 into FPN, SGD lr 0.01) with
# the backbone swapped. Baseline (no PEG, relative position bias only): that mmdet config.
_base_ = ['mmdet::swin/retinanet_swin-t-p4-w7_fpn_1x_coco.py']

custom_imports = dict(imports=['mmposenc.models', 'mmposenc.models.detectors'],
                      allow_failed_imports=False)

# Padding-exact mode on (issue 20): each image of a padded batch gets the boxes, scores and
# labels it gets alone (backbone, FPN and head keep to the image's own cells; the head decodes
# each image from the anchors of its own cells). Measured cost, exact / stock in one process
# (tools/benchmark/padding_exact_cost.py --configs this file --clock cpu --threads 1 --repeats 3
# --warmup 0, two COCO128 images at 800 x 1067 + 800 x 1202): train step 1.026 (repetitions
# 0.940, 1.114, 1.026), predict 0.989 (0.989, 1.045, 0.987): within 3 % by the medians. The one
# switch: model = dict(padding_exact=False) in your config is mmdet's RetinaNet / FPN /
# RetinaHead with the stock SwinPEG, bit for bit (same state dict: checkpoints load both ways).
model = dict(
    # mmdet's RetinaNet binding each image's size for the backbone and handing MaskedFPN the
    # padding masks of the backbone's maps
    type='mmposenc.PaddingExactRetinaNet',
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        padding_exact=True,  # False: the stock computation, padding seen as image
        out_indices=(1, 2, 3),  # as mmdet's: FPN takes stages 1-3
        drop_path_rate=0.2,
        # ImageNet weights: the checkpoint tools/train.py writes for swin-peg-tiny_16xb64_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/swin-peg-tiny_16xb64_in1k/epoch_300.pth')),
    neck=dict(type='mmposenc.MaskedFPN'),  # mmdet's FPN (same arguments) on each image's cells
    bbox_head=dict(type='mmposenc.PaddingExactRetinaHead'))  # mmdet's RetinaHead, likewise

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # SwinPEG.pegs

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
