# RetinaNet + FPN, PVT-S + PEG, 3x schedule (36 epochs) with multi-scale training
# (shorter side 640-800), CPVT [L] Table 13 (45.2). Same schedule as the PVT-T config.
_base_ = ['retinanet_pvt-peg-t_fpn_ms-3x_coco.py']

model = dict(backbone=dict(
    arch='small',
    init_cfg=dict(checkpoint='work_dirs/pvt-peg-small_8xb128_in1k/epoch_300.pth')))
