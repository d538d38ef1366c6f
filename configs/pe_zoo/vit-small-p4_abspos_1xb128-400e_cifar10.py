# Position-encoding zoo on CIFAR-10: the SaPE2 paper's setting and recipe (ViT-S, patch 4,
# 32 x 32, 400 epochs, Adam, batch 128; ../sape2/_base_/) with the learnable absolute position
# embedding of the vanilla ViT (SaPE2 Table 1, "ViT"). Every other file of this folder changes
# only `pos_encoding`.
_base_ = ['../sape2/vit-small-p4_sape2-k_1xb128-400e_cifar10.py']

model = dict(
    backbone=dict(pos_encoding=dict(_delete_=True, type='mmposenc.LearnableAbsolutePE')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
        '.pos_embed': dict(decay_mult=0.0),  # LearnableAbsolutePE.pos_embed
    }))
