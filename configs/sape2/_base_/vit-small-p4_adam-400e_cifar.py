# The SaPE2 paper's CIFAR recipe (SaPE2 Sec. 5.1) without the dataset: ViT-S (hidden size 384;
# 12 layers, 6 heads, MLP 1536, class token: the standard ViT-S, the paper names only the width)
# with patch size 4 on 32 x 32 inputs (8 x 8 patches), SaPE2 (K) in every attention layer,
# trained for 400 epochs with Adam at batch size 128.
# The paper is silent on the rest; our choices: lr 1e-3 (Adam's default) with 5 linear warm-up
# epochs, then cosine to 1e-5; weight decay 5e-5 (L2, as Adam applies it) except on norms,
# biases, the class token and the position tables; no gradient clipping; label smoothing 0.1;
# stochastic depth 0.1; augmentation = mmpretrain's CIFAR base (random crop with 4-pixel
# padding, horizontal flip).
# Leaves add `mmpretrain::_base_/datasets/cifar{10,100}_bs16.py`, the number of classes and
# the batch size.
_base_ = ['mmpretrain::_base_/default_runtime.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='mmposenc.PEViT',  # PEViT
        arch='small',
        img_size=32,
        patch_size=4,
        drop_path_rate=0.1,
        out_type='cls_token',
        # SaPE2 (K): keys meet the position tables; positions 0..16 (an 8-patch line sums
        # at most 8 gates, so nothing is clamped)
        pos_encoding=dict(type='mmposenc.SaPE2', mode='k', max_pos=16)),
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(type='Adam', lr=1e-3, betas=(0.9, 0.999), weight_decay=5e-5),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),  # SaPE2.pos_embed_x/_y, LearnableAbsolutePE
        }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=400,
         convert_to_iter_based=True)
]

train_cfg = dict(by_epoch=True, max_epochs=400, val_interval=10)
val_cfg = dict()
test_cfg = dict()
# the paper's batch size: the lr above is for 128 images per step (--auto-scale-lr rescales)
auto_scale_lr = dict(base_batch_size=128)
