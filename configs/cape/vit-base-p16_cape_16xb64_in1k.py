# ViT-B/16 with CAPE (CAPE Sec. 5.1): DeiT-B whose learnable position embedding is replaced by
# the 2D continuous augmented embedding (Delta_max = 0.5, eps_max = 1/N, lambda_max = 1.4); the
# class token keeps a learnable embedding. Training recipe: CAPE trains "carefully following
# Section 6" of DeiT, at 224 x 224. From the CAPE paper: AdamW, 300 epochs, truncated normal
# init, RandAugment, Mixup, CutMix, random erasing, repeated augmentation (footnote 2), 64
# images per GPU in mixed precision (App. B.1: train with `tools/train.py --amp`; 16 x 64 =
# 1024 as for UniViT). CAPE is silent on the rest, which is DeiT-B's (DeiT Table 9): lr
# 5e-4 * 1024 / 512, weight decay 0.05, cosine decay after 5 linear warm-up epochs, label
# smoothing 0.1, stochastic depth 0.1, no dropout, RandAugment 9 / 0.5, Mixup 0.8, CutMix 1.0,
# random erasing 0.25, no gradient clipping; no EMA of the weights (DeiT Table 8: the DeiT-B
# reference model is evaluated without one). mmpretrain's DeiT config, inherited here, clips
# gradients at 5, keeps an EMA and warms up for 20 epochs: all three are undone below.
_base_ = ['mmpretrain::deit/deit-base_16xb64_in1k.py']

# repeated augmentation (CAPE footnote 2; mmpretrain's DeiT config uses the DefaultSampler)
train_dataloader = dict(sampler=dict(type='RepeatAugSampler', shuffle=True))

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PEViT',  # PEViT
        arch='deit-base',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,
        out_type='cls_token',
        pos_encoding=dict(  # CAPE2d, ViT defaults of the paper
            type='mmposenc.CAPE2d',
            max_global_shift=0.5,
            max_local_shift='auto',  # 1 / N per axis
            max_global_scaling=1.4)),
    head=dict(in_channels=768))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(lr=5e-4 * 1024 / 512),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '_delete_': True,
            '.cls_token': dict(decay_mult=0.0),
            '.extra_embed': dict(decay_mult=0.0),  # CAPE2d's class-token embedding
        }),
    clip_grad=None)  # DeiT Table 9: no gradient clipping (mmpretrain's DeiT: max_norm=5)

# DeiT Table 9: 5 warm-up epochs (mmpretrain's DeiT config inherits the Swin schedule's 20), from
# lr * 1e-3 = 1e-6, then cosine decay to 1e-5 at the last epoch (the Runner sets the cosine's
# end to train_cfg.max_epochs = 300)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5),
]

# no EMA hook (mmpretrain's DeiT config adds EMAHook(momentum=4e-5), whose averaged weights
# would be the ones validated, tested and saved; DeiT's reported DeiT-B has none, Table 8)
custom_hooks = []

# Resolution TTA (CAPE Sec. 5.1.3; Table 1 reports it for CAPE and UniViT; the UniViT and abspos
# configs inherit it), run by `tools/test.py --tta`: the mean logits of the views at r - 32, r,
# r + 32 with r = 224; every view is ResizeEdge + CenterCrop of the source image at the DeiT
# test ratio 224 / 256 (the paper does not give its crop).
tta_model = dict(type='mmposenc.ResolutionTTAClassifier')
tta_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='TestTimeAug',
        transforms=[
            [
                dict(type='Compose', transforms=[
                    dict(type='ResizeEdge', scale=int(s * 256 / 224), edge='short',
                         backend='pillow', interpolation='bicubic'),
                    dict(type='CenterCrop', crop_size=s),
                ]) for s in (192, 224, 256)
            ],
            [dict(type='PackInputs')],
        ]),
]
