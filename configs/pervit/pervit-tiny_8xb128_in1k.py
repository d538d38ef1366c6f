# PerViT-T on ImageNet-1k with the recipe of the paper (Table A6; where the table is silent,
# the official main.py defaults): 300 epochs, batch 1024, AdamW lr 5e-4 * 1024 / 512, weight
# decay 0.03 (T; 0.05 for S and M; not on norms and biases), 5 warm-up epochs (T, S; 20 for
# M) from 1e-6, cosine to 1e-5, no gradient clipping, RandAugment rand-m9-mstd0.5-inc1, random
# erasing 0.25, Mixup 0.8 / CutMix 1.0, label smoothing 0.1, repeated augmentation,
# stochastic depth 0 (T) / 0.1 (S) / 0.2 (M).
#
# Ablations of Tables 1, 5 and A3 are backbone options, e.g.
#   --cfg-options model.backbone.with_phi_p=False              Table 1 (b), Table A3 "absent"
#   --cfg-options model.backbone.with_phi_c=False model.backbone.flop_match=True   (c)
#   --cfg-options model.backbone.conv_stem=False               (d) (flop_match: footnote 8)
#   --cfg-options model.backbone.with_cpe=False                (e)
#   --cfg-options model.backbone.ppe_init=conv                 Table 5 / A3 "conv" (or rand)
#   --cfg-options model.backbone.freeze_phi_p=True             Table A3 "fixed"
#   --cfg-options model.backbone.ppe_cfg.kernel_size=1         Table 5 "Euc + ML" (and
#                 ppe_cfg.multi_layer=False: "Euc"; ppe_cfg.embedding=lrn: "Lrn ...")
# (configs/pervit/README.md lists every row of Tables 1, 5 and A3 with its options.)
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    'mmpretrain::_base_/schedules/imagenet_bs1024_adamw_swin.py',
    'mmpretrain::_base_/default_runtime.py',
]

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='mmposenc.PerViT',  # PerViT
        arch='tiny',
        out_indices=(3, ),
        drop_path_rate=0.0,
        ppe_init='peripheral'),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=280,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
        dict(type='Constant', layer='LayerNorm', val=1., bias=0.),
    ],
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8),
                             dict(type='CutMix', alpha=1.0)]))

# 8 GPUs x 128 images, repeated augmentation as in DeiT / the official code
train_dataloader = dict(batch_size=128, sampler=dict(type='RepeatAugSampler', shuffle=True))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(type='AdamW', lr=5e-4 * 1024 / 512, weight_decay=0.03, eps=1e-8,
                   betas=(0.9, 0.999)),  # weight decay 0.03 for T (Table A6)
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,  # LayerNorm, BatchNorm and Phi_p's GroupNorms
        bias_decay_mult=0.0,  # includes the shared distance_embed.bias (b_r)
    ),
    clip_grad=None)

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6 / 1e-3, by_epoch=True, begin=0, end=5,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5, end=300)
]

train_cfg = dict(by_epoch=True, max_epochs=300, val_interval=1)
auto_scale_lr = dict(base_batch_size=1024)
