# CPVT-B-GAP: no class token at all; the classifier reads the global average of the
# (final-normalised) patch tokens (CPVT [L] Fig. 1c). As in the paper's GAP rows ([L]
# Table 3, marked with a double dagger), one PEG after each of encoder layers 0-5.
_base_ = ['cpvt-base-0to5_16xb64_in1k.py']

model = dict(backbone=dict(out_type='avg_featmap'))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        '_delete_': True,
        'backbone.pegs': dict(decay_mult=0.0),  # PEG convolutions (CPVT.pegs)
    }))
