# PVT-Small + PEG + GAP (= Twins-PCPVT-S).
_base_ = ['pvt-peg-tiny_8xb128_in1k.py']

model = dict(backbone=dict(arch='small', drop_path_rate=0.2))
