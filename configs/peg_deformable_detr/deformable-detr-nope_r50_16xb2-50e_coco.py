# Deformable-DETR w/o PE (CPVT Table 4): no sine encoding in the encoder (the level embedding,
# which carries no spatial position, stays).
_base_ = './deformable-detr-sine_r50_16xb2-50e_coco.py'

model = dict(encoder_pos='none', level_embed=True)
