# Baseline without PEG: RetinaNet + FPN, mmdet's PVT-Small v1, 3x + multi-scale (the schedule
# of retinanet_pvt-peg-s_fpn_ms-3x_coco.py).
_base_ = ['retinanet_pvt-t_fpn_ms-3x_coco.py']

model = dict(
    backbone=dict(
        num_layers=[3, 4, 6, 3],
        init_cfg=dict(checkpoint='https://github.com/whai362/PVT/'
                      'releases/download/v2/pvt_small.pth')))
