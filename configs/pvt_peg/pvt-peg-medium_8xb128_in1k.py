# PVT-Medium + PEG + GAP (the architecture of Twins-PCPVT-B). Recipe of
# pvt-peg-tiny_8xb128_in1k.py with PVT-Medium's two changes (whai362/PVT
# configs/pvt/pvt_medium.py): stochastic depth 0.3 and gradient clipping at max norm 1.0.
_base_ = ['pvt-peg-tiny_8xb128_in1k.py']

model = dict(backbone=dict(arch='medium', drop_path_rate=0.3))

optim_wrapper = dict(clip_grad=dict(_delete_=True, max_norm=1.0))  # PVT's pvt_medium.py: clip_grad=1.0
