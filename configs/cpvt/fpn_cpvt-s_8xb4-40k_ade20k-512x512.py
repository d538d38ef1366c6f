# Semantic FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, ADE20K 512x512: the recipe
# of configs/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py (PVT's: 8 x 4 images, 40k
# iterations, AdamW lr 2e-4, weight decay 1e-4, poly 0.9 to 0), inherited, with the backbone
# and neck swapped. The outputs of layers 2, 5, 8 and 11 (stride 16) are rescaled to strides
# 4/8/16/32 by mmposenc.SimplePyramid (mmseg's BEiT / ViT + MultiLevelNeck way) before FPN.
_base_ = ['../pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

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
        # ImageNet weights: the checkpoint tools/train.py writes for cpvt-small-gap_4xb256_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/cpvt-small-gap_4xb256_in1k/epoch_300.pth')),
    neck=[
        dict(type='mmposenc.SimplePyramid', in_channels=embed_dims,
             scales=(4, 2, 1, 0.5)),  # strides 16 -> 4, 8, 16, 32
        dict(type='FPN', in_channels=[embed_dims] * 4, out_channels=256, num_outs=4),
    ])

# the base's custom key 'backbone.pegs' (no weight decay) names CPVT.pegs as well
