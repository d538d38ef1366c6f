# Semantic FPN, ADE20K 512x512, PVT-Tiny with its absolute position embeddings and no PEG,
# pretrained with GAP: the "PVT-tiny+GAP" row of CPVT [L] Table 13 (backbone
# of pvt-gap-tiny_8xb128_in1k.py). Recipe: fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py.
_base_ = ['fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        with_peg=False,
        with_pos_embed=True,
        init_cfg=dict(checkpoint='work_dirs/pvt-gap-tiny_8xb128_in1k/epoch_300.pth')))

optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'_delete_': True}))  # no PEG
