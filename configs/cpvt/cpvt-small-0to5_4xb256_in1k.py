# CPVT-S with PEGs after encoder layers 0-5 (positions 0, 1, 2, 3, 4).
_base_ = ['cpvt-small_4xb256_in1k.py']

model = dict(backbone=dict(peg_positions=(0, 1, 2, 3, 4)))
