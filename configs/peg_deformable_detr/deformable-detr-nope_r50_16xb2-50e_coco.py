# Deformable-DETR (4 levels) without the encoder's sine encoding (the level embedding, which
# carries no spatial position, stays). Beyond the paper: CPVT [E] Table 4 has single-scale DD
# rows only and no "DD w/o PE".
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(encoder_pos='none', level_embed=True)
