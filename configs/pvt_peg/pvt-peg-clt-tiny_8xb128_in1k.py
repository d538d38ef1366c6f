# PVT-Tiny + PEG of CPVT [L] Table 13 (77.3 top-1): the baseline pvt-tiny_8xb128_in1k.py (its
# absolute position embeddings and class-token head kept) with one PEG after the first block of
# every stage. [L] §4.6 describes removing the position embeddings for the PEG + GAP model only;
# with_pos_embed=False here is the other reading, one setting away.
_base_ = ['pvt-tiny_8xb128_in1k.py']

model = dict(backbone=dict(with_peg=True))

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={
        'backbone.pegs': dict(decay_mult=0.0),  # PVTPEG.pegs
    }))
