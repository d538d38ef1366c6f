# RetinaNet + FPN, PVT-M + PEG, 3x schedule (36 epochs) with multi-scale training
# (shorter side 640-800), CPVT paper Table 13. Same schedule as the PVT-T config.
_base_ = ['retinanet_pvt-peg-t_fpn_ms-3x_coco.py']

model = dict(backbone=dict(arch='medium', drop_path_rate=0.3))
