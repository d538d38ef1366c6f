# RetinaNet + FPN, 3x + multi-scale, PVT-Tiny with its absolute position embeddings and no PEG,
# pretrained with GAP: the "PVT-tiny+GAP" row of CPVT [L] Table 13 (backbone
# of pvt-gap-tiny_8xb128_in1k.py). Recipe: retinanet_pvt-peg-t_fpn_ms-3x_coco.py.
_base_ = ['retinanet_pvt-peg-t_fpn_ms-3x_coco.py']

model = dict(
    backbone=dict(
        with_peg=False,
        with_pos_embed=True,
        init_cfg=dict(checkpoint='work_dirs/pvt-gap-tiny_8xb128_in1k/epoch_300.pth')))

optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'_delete_': True}))  # no PEG
