# PVT-Medium + PEG + GAP (= Twins-PCPVT-B).
_base_ = ['pvt-peg-tiny_8xb128_in1k.py']

model = dict(backbone=dict(arch='medium', drop_path_rate=0.3))
