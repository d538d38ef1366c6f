# The CAPE paper's baseline: the same PEViT-B/16 and DeiT-B recipe with the learnable absolute
# position embedding (resized bicubically when tested at other resolutions).
_base_ = ['vit-base-p16_cape_16xb64_in1k.py']

model = dict(
    backbone=dict(pos_encoding=dict(_delete_=True, type='mmposenc.LearnableAbsolutePE')))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        '.cls_token': dict(decay_mult=0.0),
        '.pos_embed': dict(decay_mult=0.0),  # LearnableAbsolutePE.pos_embed
    }))
