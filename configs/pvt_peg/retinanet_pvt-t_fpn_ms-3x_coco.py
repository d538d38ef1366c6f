# Baseline without PEG: RetinaNet + FPN with mmdet's PVT-Tiny v1 (absolute PE, the backbone of
# mmdet::pvt/retinanet_pvt-t_fpn_1x_coco.py), 3x schedule (36 epochs) + multi-scale training.
# Schedule, pipeline and optimizer come from retinanet_pvt-peg-t_fpn_ms-3x_coco.py, so the
# +/- PEG rows of CPVT [L] Table 13 differ only in the backbone.
_base_ = ['retinanet_pvt-peg-t_fpn_ms-3x_coco.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='PyramidVisionTransformer',  # mmdet's PVT v1
        num_layers=[2, 2, 2, 2],
        init_cfg=dict(checkpoint='https://github.com/whai362/PVT/'
                      'releases/download/v2/pvt_tiny.pth')))

# mmdet's PVT has no PEG: drop the 'backbone.pegs' key, it would match nothing
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'_delete_': True}))
