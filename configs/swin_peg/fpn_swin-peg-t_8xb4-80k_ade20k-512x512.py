# Semantic FPN with Swin-T + PEG (+GAP-pretrained), ADE20K 512x512, 80k iterations: mmseg's
# Twins-PCPVT Semantic FPN recipe (AdamW lr 1e-4, weight decay 1e-4, poly), the same as
# configs/pvt_peg/fpn_pvt-peg-t_8xb4-80k_ade20k-512x512.py, with the backbone swapped.
_base_ = ['mmseg::twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        # an mmpretrain classifier checkpoint of configs/swin_peg/swin-peg-tiny_16xb64_in1k.py
        init_cfg=None),
    neck=dict(in_channels=[96, 192, 384, 768]))  # FPN

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # SwinPEG.pegs
