# Semantic FPN, ADE20K 512x512, PVT-Tiny + PEG with PVT's absolute position embeddings kept: the
# "PVT-tiny+PEG" row of CPVT [L] Table 13. Backbone pretrained by
# pvt-peg-clt-tiny_8xb128_in1k.py (its class token is left unused and the class
# token's PE entry dropped on loading). Recipe: fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py.
_base_ = ['fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        with_pos_embed=True,
        init_cfg=dict(checkpoint='work_dirs/pvt-peg-clt-tiny_8xb128_in1k/epoch_300.pth')))
