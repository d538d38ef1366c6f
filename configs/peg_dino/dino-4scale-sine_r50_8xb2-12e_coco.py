# DINO-4scale-R50 as mmdet trains it (mmdet's config unchanged: 900 queries, 6+6 layers,
# denoising queries, AdamW lr 1e-4, 12 epochs with lr x0.1 at epoch 11, total batch 16 =
# 8 GPUs x 2), with the encoder position encoding chosen by encoder_pos. With 'sine' and mmdet's
# ChannelMapper it is mmdet's DINO (same state dict; bit-identical where mmdet's padding masks
# are exact, tested in tests/test_detectors/test_encoder_pos_models.py); padding masks are exact
# everywhere and the neck normalises each image's valid cells (MaskedChannelMapper).
_base_ = 'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

model = dict(
    type='mmposenc.PEGDINO',  # mmposenc.models.detectors.PEGDINO
    encoder_pos='sine',  # 'sine' | 'peg' | 'sine+peg' | 'cape' | 'cape+peg' | 'none'
    # mmdet's ChannelMapper made padding-exact (GroupNorm over each image's valid cells,
    # padding zeroed before the extra stride-64 level; same state-dict keys: mmdet's
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
