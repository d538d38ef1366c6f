# Semantic FPN with Swin-T + PEG (+GAP-pretrained), ADE20K 512x512: the recipe of
# configs/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py (PVT's: 8 x 4 images, 40k
# iterations, AdamW lr 2e-4, weight decay 1e-4, poly 0.9 to 0), inherited, with the backbone
# swapped.
_base_ = ['../pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        # ImageNet weights: the checkpoint tools/train.py writes for swin-peg-tiny_16xb64_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/swin-peg-tiny_16xb64_in1k/epoch_300.pth')),
    neck=dict(in_channels=[96, 192, 384, 768]))  # FPN

# the base's custom key 'backbone.pegs' (no weight decay) names SwinPEG.pegs as well
