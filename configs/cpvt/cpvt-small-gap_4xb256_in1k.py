# CPVT-S-GAP: no class token; global average pooling of the patch tokens.
_base_ = ['cpvt-small_4xb256_in1k.py']

model = dict(backbone=dict(out_type='avg_featmap'))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        'backbone.pegs': dict(decay_mult=0.0),  # PEG convolutions (CPVT.pegs)
    }))
