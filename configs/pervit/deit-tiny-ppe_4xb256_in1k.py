# DeiT-T + PPE (PerViT Table 2, 74.4 top-1 against DeiT-T's 72.2): DeiT-T with PerViT's
# peripheral position encoding added to every attention layer (MHSA -> MPA through the additive
# bias log Phi_p, one shared w_r, peripheral initialisation over the 12 layers). The learnable
# absolute position embedding of DeiT is kept.
# Recipe: PerViT implements Phi_p "on DeiT [62] baseline" (Sec. 4.2) and follows DeiT's training
# recipe (Sec. 4, App. F); PerViT gives no recipe of its own for this row, so it is DeiT's (DeiT
# Table 9, the DeiT-B column of PerViT Table A6): 300 epochs, batch 1024, AdamW lr
# 5e-4 * 1024 / 512, weight decay 0.05, cosine decay after 5 linear warm-up epochs, label
# smoothing 0.1, stochastic depth 0.1, repeated augmentation, RandAugment 9 / 0.5, Mixup 0.8,
# CutMix 1.0, random erasing 0.25, no gradient clipping. mmpretrain's DeiT-T config, inherited
# here, clips gradients at 5, warms up for 20 epochs, samples without repeated augmentation and
# has no stochastic depth: all four are undone below (it keeps no EMA of the weights, as DeiT).
_base_ = ['mmpretrain::deit/deit-tiny_4xb256_in1k.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PEViT',  # PEViT, the mmposenc ViT/DeiT with pluggable encodings
        arch='deit-tiny',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1,  # DeiT Table 9 (mmpretrain's DeiT-T config: none)
        out_type='cls_token',
        pos_encoding=[
            dict(type='mmposenc.LearnableAbsolutePE'),  # DeiT's pos_embed
            dict(type='mmposenc.PeripheralPE', init='peripheral'),  # PeripheralPE
        ]))

# repeated augmentation (DeiT Table 9; mmpretrain's DeiT config uses the DefaultSampler)
train_dataloader = dict(sampler=dict(type='RepeatAugSampler', shuffle=True))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    optimizer=dict(lr=5e-4 * 1024 / 512),
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,  # also Phi_p's GroupNorms
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),  # LearnableAbsolutePE.pos_embed
        }),
    clip_grad=None)  # DeiT Table 9 / PerViT Table A6: no gradient clipping (mmpretrain's: 5)

# DeiT Table 9: 5 warm-up epochs (mmpretrain's DeiT config inherits the Swin schedule's 20), from
# lr * 1e-3 = 1e-6, then cosine decay to 1e-5 at the last epoch (the Runner sets the cosine's
# end to train_cfg.max_epochs = 300)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=5, convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=5),
]
