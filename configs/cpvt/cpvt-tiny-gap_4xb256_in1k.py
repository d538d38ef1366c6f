# CPVT-Ti-GAP: no class token at all; the classifier reads the global average of the
# (final-normalised) patch tokens (CPVT paper Fig. 1c).
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(out_type='avg_featmap'))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        'backbone.pegs': dict(decay_mult=0.0),  # PEG convolutions (CPVT.pegs)
    }))
