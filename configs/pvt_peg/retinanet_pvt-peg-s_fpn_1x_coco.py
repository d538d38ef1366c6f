# RetinaNet + FPN, PVT-Small + PEG, 1x. Baseline: mmdet::pvt/retinanet_pvt-s_fpn_1x_coco.py.
_base_ = ['retinanet_pvt-peg-t_fpn_1x_coco.py']

model = dict(backbone=dict(
    arch='small',
    init_cfg=dict(checkpoint='work_dirs/pvt-peg-small_8xb128_in1k/epoch_300.pth')))
