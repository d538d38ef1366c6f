# ViT-B/16 with CAPE (CAPE Sec. 5.1): DeiT-B whose learnable position embedding is replaced by
# the 2D continuous augmented embedding (Delta_max = 0.5, eps_max = 1/N, lambda_max = 1.4); the
# class token keeps a learnable embedding. Training recipe = DeiT-B's, as CAPE footnote 2 lists
# it (AdamW, lr 5e-4 * batch / 512, weight decay 0.05, 300 epochs cosine, label smoothing 0.1,
# RandAugment, Mixup 0.8, CutMix 1.0, random erasing, repeated augmentation, stochastic
# depth 0.1), at 224 x 224.
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
    optimizer=dict(lr=5e-4 * 1024 / 512),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '_delete_': True,
            '.cls_token': dict(decay_mult=0.0),
            '.extra_embed': dict(decay_mult=0.0),  # CAPE2d's class-token embedding
        }))
