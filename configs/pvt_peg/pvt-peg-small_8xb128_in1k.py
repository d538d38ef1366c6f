# PVT-Small + PEG + GAP (the architecture of Twins-PCPVT-S). Recipe of
# pvt-peg-tiny_8xb128_in1k.py, PVT-Small's (whai362/PVT configs/pvt/pvt_small.py): stochastic
# depth 0.1, no gradient clipping (this config had 0.2 before; CPVT states no value of its own).
_base_ = ['pvt-peg-tiny_8xb128_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.1))
