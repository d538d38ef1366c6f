# DETR with its 2D sine position encoding, the "DETR*" row of CPVT [E] Table 4 (33.7 AP, reproduced by
# the authors with DETR's released code), trained with the 50-epoch setting of [E] §4.3: AdamW,
# lr 1e-4, backbone lr 2e-5, weight decay 1e-4, total batch 32 (16 GPUs x 2), lr x0.1 at epoch
# 40, 100 queries, no focal loss, loss weights cls 1 / L1 5 / GIoU 2; the rest is DETR's
# ("almost the same setting as [5]": its augmentation and gradient clipping at 0.1).
# PEGDETR with encoder_pos='sine' computes exactly what mmdet's DETR computes.
_base_ = 'mmdet::detr/detr_r50_8xb2-150e_coco.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

model = dict(
    type='mmposenc.PEGDETR',  # mmposenc.models.detectors.PEGDETR
    encoder_pos='sine',  # 'sine' | 'peg' | 'sine+peg' | 'none'
    decoder_pos='sine',  # memory positions of the decoder cross-attention
    # mmdet's ResNet with its padding-exact mode (same state dict: mmdet's checkpoints load
    # both ways): each image of a padded batch gets the maps it gets alone (issue 20).
    # The one switch: padding_exact=False is mmdet's ResNet bit for bit.
    backbone=dict(type='mmposenc.PaddingExactResNet', padding_exact=True),
    num_queries=100,
    bbox_head=dict(  # DETRHead
        loss_cls=dict(loss_weight=1.0),
        loss_bbox=dict(loss_weight=5.0),
        loss_iou=dict(loss_weight=2.0)),
    train_cfg=dict(
        assigner=dict(  # HungarianAssigner: match costs follow the loss weights
            type='HungarianAssigner',
            match_costs=[
                dict(type='ClassificationCost', weight=1.0),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0)
            ])))

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(
    batch_size=2,  # x 16 GPUs = 32
    dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=1e-4, weight_decay=1e-4),
    paramwise_cfg=dict(
        custom_keys={'backbone': dict(lr_mult=2e-5 / 1e-4, decay_mult=1.0)}))

max_epochs = 50
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[40],
        gamma=0.1)
]
auto_scale_lr = dict(base_batch_size=32)
