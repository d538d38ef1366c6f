# CPVT-Ti: DeiT-Ti whose learnable position embedding is replaced by one PEG (3x3 depthwise
# conv, zero padding) after the first encoder layer ("position 0"; CPVT [L] Tables 2, 7, 12:
# 72.4). Training recipe of the paper ([E] Table 13, [L] Table 10 and §4.1) = DeiT's: AdamW,
# lr 5e-4 * batch / 512, weight decay 0.05, 300 epochs cosine with 5 warm-up epochs, label
# smoothing 0.1, RandAugment m9-mstd0.5, Mixup 0.8, CutMix 1.0, random erasing 0.25, repeated
# augmentation, stochastic depth 0.1, and no gradient clipping (mmpretrain's DeiT config clips
# at max_norm 5: removed). Batch: Table 10 lists 1024 (used here); §4.1 says 2048 with the
# same lr formula, i.e. `--auto-scale-lr` at 2048 images (auto_scale_lr.base_batch_size=1024).
_base_ = ['mmpretrain::deit/deit-tiny_4xb256_in1k.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.CPVT',  # CPVT
        arch='tiny',
        peg_positions=(0, ),
        out_type='cls_token',
        drop_path_rate=0.1),
    head=dict(in_channels=192))

train_dataloader = dict(
    batch_size=256, sampler=dict(type='RepeatAugSampler', shuffle=True))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(lr=5e-4 * 1024 / 512),
    clip_grad=None,  # [E] Table 13 / [L] Table 10: no gradient clipping
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        # the DeiT base names '.pos_embed', which CPVT does not have: replace, do not merge
        custom_keys={
            '_delete_': True,
            '.cls_token': dict(decay_mult=0.0),
            'backbone.pegs': dict(decay_mult=0.0),  # PEG convolutions (CPVT.pegs)
        }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5)
]
