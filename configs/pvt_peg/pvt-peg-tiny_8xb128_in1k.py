# PVT-Tiny + PEG + GAP (CPVT [L] §4.6 and Table 13: 78.1; the PVT-v1 analogue of
# Twins-PCPVT): PVT v1 without its absolute position embeddings and class token, one PEG after
# the first block of each stage, global average pooling of the last stage.
# Recipe: CPVT [L] §4.6 trains the PVT rows of Table 13 with "the same training settings" as PVT,
# i.e. PVT v1's own (whai362/PVT classification/main.py and configs/pvt/pvt_tiny.py, DeiT's
# recipe): 300 epochs, batch 8 x 128 = 1024, AdamW lr 5e-4 * 1024 / 512, weight decay 0.05,
# cosine decay after 5 linear warm-up epochs from 1e-6 to 1e-5, label smoothing 0.1, stochastic
# depth 0.1 (T, S; 0.3 for M), repeated augmentation, RandAugment 9 / 0.5, Mixup 0.8, CutMix
# 1.0, random erasing 0.25, no gradient clipping (T, S; M clips at 1.0). The mmpretrain
# Twins-PCPVT config inherited here clips at 5 and samples without repeated augmentation: both
# are undone below.
_base_ = ['mmpretrain::twins/twins-pcpvt-small_8xb128_in1k.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PVTPEG',  # PVTPEG
        arch='tiny',
        out_indices=(3, ),
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(in_channels=512))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={'backbone.pegs': dict(decay_mult=0.0)}),  # PVTPEG.pegs
    clip_grad=None)  # PVT's pvt_tiny.py / pvt_small.py: clip_grad=None (mmpretrain's: max_norm 5)

# repeated augmentation (PVT's main.py: repeated_aug=True; mmpretrain's Twins config: DefaultSampler)
train_dataloader = dict(sampler=dict(type='RepeatAugSampler', shuffle=True))
