# RetinaNet + FPN, 1x, PVT-Tiny + PEG with PVT's absolute position embeddings kept: the
# "PVT-tiny+PEG" row of CPVT [L] Table 13. Backbone pretrained by
# pvt-peg-clt-tiny_8xb128_in1k.py (its class token is left unused and the class
# token's PE entry dropped on loading). Recipe: retinanet_pvt-peg-t_fpn_1x_coco.py.
_base_ = ['retinanet_pvt-peg-t_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        with_pos_embed=True,
        init_cfg=dict(checkpoint='work_dirs/pvt-peg-clt-tiny_8xb128_in1k/epoch_300.pth')))
