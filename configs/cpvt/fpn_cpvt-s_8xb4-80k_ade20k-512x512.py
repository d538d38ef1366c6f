# Semantic FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, ADE20K 512x512, 80k
# iterations: mmseg's Twins-PCPVT Semantic FPN recipe (AdamW lr 1e-4, weight decay 1e-4, poly),
# as configs/pvt_peg/fpn_pvt-peg-t_8xb4-80k_ade20k-512x512.py. The outputs of layers 2, 5, 8
# and 11 (stride 16) are rescaled to strides 4/8/16/32 by mmposenc.SimplePyramid (mmseg's BEiT /
# ViT + MultiLevelNeck way) before FPN.
_base_ = ['mmseg::twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

embed_dims = 384
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.CPVT',  # CPVT
        arch='small',
        # PEGs after layers 0-4, as CPVT-S-GAP (cpvt-small-gap_4xb256_in1k.py); for a
        # checkpoint of cpvt-small_4xb256_in1k.py (one PEG) set peg_positions=(0, )
        peg_positions=(0, 1, 2, 3, 4),
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        drop_path_rate=0.1,
        # an mmpretrain classifier checkpoint of configs/cpvt/cpvt-small(-gap)_4xb256_in1k.py
        init_cfg=None),
    neck=[
        dict(type='mmposenc.SimplePyramid', in_channels=embed_dims,
             scales=(4, 2, 1, 0.5)),  # strides 16 -> 4, 8, 16, 32
        dict(type='FPN', in_channels=[embed_dims] * 4, out_channels=256, num_outs=4),
    ])

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'backbone.pegs': dict(decay_mult=0.0)}))  # CPVT.pegs
