# Baseline without PEG: Semantic FPN with mmdet's PVT-Tiny v1 (absolute position embeddings)
# initialised from PVT's ImageNet checkpoint, as mmdet's PVT RetinaNet configs do (the
# baselines of CPVT [L] Table 13 are PVT's own: 35.7 mIoU for PVT-T). Recipe, data and head of
# fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py (PVT's): only the backbone differs. mmseg has no
# PVT v1, so the backbone is mmdet's, reached through its registry scope.
_base_ = ['fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models', 'mmdet.models.backbones.pvt'],
                      allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmdet.PyramidVisionTransformer',  # PVT v1 with absolute PE
        num_layers=[2, 2, 2, 2],
        out_indices=(0, 1, 2, 3),
        init_cfg=dict(checkpoint='https://github.com/whai362/PVT/'
                      'releases/download/v2/pvt_tiny.pth')))

# mmdet's PVT has no PEG: drop the 'backbone.pegs' key, it would match nothing
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'_delete_': True}))
