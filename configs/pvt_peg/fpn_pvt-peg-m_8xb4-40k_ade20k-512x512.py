# Semantic FPN, PVT-Medium + PEG, ADE20K 512x512 (PVT's recipe, see the PVT-T config).
_base_ = ['fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

model = dict(backbone=dict(
    arch='medium', drop_path_rate=0.3,
    init_cfg=dict(checkpoint='work_dirs/pvt-peg-medium_8xb128_in1k/epoch_300.pth')))
