# Deformable-DETR with its sine encoding + level embedding, trained with the Deformable-DETR
# paper's own recipe, i.e. mmdet's config unchanged (AdamW lr 2e-4, backbone / sampling offsets /
# reference points x0.1, weight decay 1e-4, gradient clipping 0.1, total batch 32 = 16 GPUs x 2,
# 50 epochs with lr x0.1 at epoch 40, 300 queries, focal loss 2 / L1 5 / GIoU 2, DETR's
# multi-scale + crop augmentation). CPVT [E] Table 4 takes its DD rows from the Deformable-DETR
# paper (no star: not re-run), so this recipe, not CPVT's DETR setting of §4.3, is the one its
# DD and DD + PEG rows share. PEGDeformableDETR with encoder_pos='sine' computes exactly what
# mmdet's DeformableDETR computes (tested).
_base_ = 'mmdet::deformable_detr/deformable-detr_r50_16xb2-50e_coco.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

model = dict(
    type='mmposenc.PEGDeformableDETR',  # mmposenc.models.detectors.PEGDeformableDETR
    encoder_pos='sine',  # 'sine' | 'peg' | 'sine+peg' | 'cape' | 'cape+peg' | 'none'
    # mmdet's ChannelMapper made padding-exact: GroupNorm statistics over each image's valid
    # cells, padding zeroed before the extra stride-64 level (same state-dict keys: mmdet's
    # checkpoints load). type='ChannelMapper' gives the stock neck back.
    neck=dict(type='mmposenc.MaskedChannelMapper'),
    # mmdet's ResNet with its padding-exact mode (same state dict: mmdet's checkpoints load
    # both ways): each image of a padded batch gets the maps it gets alone (issue 20).
    # The one switch: padding_exact=False is mmdet's ResNet bit for bit.
    backbone=dict(type='mmposenc.PaddingExactResNet', padding_exact=True))

# mmdet's CocoDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedCocoDataset'))
test_dataloader = val_dataloader

# mmengine's parameter groups, logged as one line per rule, not one per parameter
optim_wrapper = dict(constructor='mmposenc.SummaryOptimWrapperConstructor')
