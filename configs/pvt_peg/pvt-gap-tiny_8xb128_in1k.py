# PVT-Tiny + GAP of CPVT [L] Table 13 (75.9 top-1): PVT v1 with its absolute position
# embeddings and no PEG, the class token replaced by global average pooling of the last stage.
_base_ = ['pvt-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(out_type='featmap'),
    neck=dict(_delete_=True, type='GlobalAveragePooling'))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        'backbone.pos_embeds': dict(decay_mult=0.0),  # PVTPEG.pos_embeds
    }))
