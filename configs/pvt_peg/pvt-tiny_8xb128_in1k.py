# PVT-Tiny, the baseline of CPVT [L] Table 13 (75.0 top-1): PVT v1 with its learnable absolute
# position embeddings, no PEG, and its class-token head, built as mmposenc.PVTPEG settings so
# that the four PVT-T rows of the table (PVT, + PEG, + GAP, + PEG + GAP) share one
# implementation and the recipe of pvt-peg-tiny_8xb128_in1k.py ([L] §4.6: "the same training
# settings").
_base_ = ['pvt-peg-tiny_8xb128_in1k.py']

model = dict(
    backbone=dict(with_peg=False, with_pos_embed=True, out_type='cls_token'),
    neck=None)  # the class token feeds the linear head

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,  # no PEG here
        'backbone.pos_embeds': dict(decay_mult=0.0),  # PVTPEG.pos_embeds
        'backbone.cls_token': dict(decay_mult=0.0),
    }))
