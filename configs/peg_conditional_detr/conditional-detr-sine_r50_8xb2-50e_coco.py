# Conditional-DETR-R50 as mmdet trains it (mmdet's config unchanged: 300 queries, 6+6 layers,
# AdamW lr 1e-4, 50 epochs with lr x0.1 at epoch 40, total batch 16 = 8 GPUs x 2), with the
# encoder position encoding chosen by encoder_pos. With 'sine' it is mmdet's ConditionalDETR
# (same state dict; bit-identical where mmdet's padding mask is exact, tested in
# tests/test_detectors/test_encoder_pos_models.py); its padding masks are exact everywhere.
_base_ = 'mmdet::conditional_detr/conditional-detr_r50_8xb2-50e_coco.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

model = dict(
    type='mmposenc.PEGConditionalDETR',  # mmposenc.models.detectors.PEGConditionalDETR
    encoder_pos='sine',  # 'sine' | 'peg' | 'sine+peg' | 'cape' | 'cape+peg' | 'none'
    # memory positions of the decoder's cross-attention keys (the conditional spatial queries
    # attend to them): the stock sine in every variant of this folder
    decoder_pos='sine',
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
