# Baseline without PEG: Mask R-CNN + FPN with mmdet's PVT-Tiny v1 (absolute PE), 1x. mmdet
# ships no PVT Mask R-CNN config: its R-50 one with the backbone swapped and the optimizer of
# PVT's official mask_rcnn_pvt_t_fpn_1x_coco.py (AdamW, lr 2e-4 for 8 GPUs x 2 images,
# weight decay 1e-4).
_base_ = ['mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='PyramidVisionTransformer',  # mmdet's PVT v1
        num_layers=[2, 2, 2, 2],
        init_cfg=dict(checkpoint='https://github.com/whai362/PVT/'
                      'releases/download/v2/pvt_tiny.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))  # FPN

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(_delete_=True, type='AdamW', lr=2e-4, weight_decay=1e-4))

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader
