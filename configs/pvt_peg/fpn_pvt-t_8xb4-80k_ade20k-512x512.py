# Baseline without PEG: Semantic FPN with mmdet's PVT-Tiny v1 (absolute position embeddings),
# same recipe as fpn_pvt-peg-t_8xb4-80k_ade20k-512x512.py. mmseg has no PVT v1, so the
# backbone is mmdet's, reached through its registry scope.
_base_ = ['mmseg::twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py']

custom_imports = dict(imports=['mmdet.models.backbones.pvt'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdet.PyramidVisionTransformer',  # PVT v1 with absolute PE
        num_layers=[2, 2, 2, 2],
        out_indices=(0, 1, 2, 3),
        init_cfg=None),
    neck=dict(in_channels=[64, 128, 320, 512]))  # FPN
