# Semantic FPN with PVT-Tiny + PEG (+GAP-pretrained), ADE20K 512x512, 80k iterations: the
# Twins-PCPVT Semantic FPN recipe of mmseg (AdamW lr 1e-4, weight decay 1e-4, poly).
# Baseline (absolute PE): fpn_pvt-t_8xb4-80k_ade20k-512x512.py beside this file.
_base_ = ['mmseg::twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PVTPEG',  # PVTPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.1,
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 320, 512]))  # FPN

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # PVTPEG.pegs
