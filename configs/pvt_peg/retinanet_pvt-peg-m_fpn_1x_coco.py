# RetinaNet + FPN, PVT-Medium + PEG, 1x. Baseline: mmdet::pvt/retinanet_pvt-m_fpn_1x_coco.py.
_base_ = ['retinanet_pvt-peg-t_fpn_1x_coco.py']

model = dict(backbone=dict(
    arch='medium', drop_path_rate=0.3,
    init_cfg=dict(checkpoint='work_dirs/pvt-peg-medium_8xb128_in1k/epoch_300.pth')))
