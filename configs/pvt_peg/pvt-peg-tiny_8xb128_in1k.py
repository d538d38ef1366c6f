# PVT-Tiny + PEG + GAP (CPVT [L] §4.6 and Table 13: 78.1; the PVT-v1 analogue of
# Twins-PCPVT): PVT v1 without its absolute position embeddings and class token, one PEG after
# the first block of each stage, global average pooling of the last stage. Recipe of mmpretrain's Twins-PCPVT
# (DeiT-style, 300 epochs, AdamW lr 5e-4 * 1024 / 512, weight decay 0.05, 5 warm-up epochs).
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
        custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # PVTPEG.pegs
