# DINO-4scale-R50 without the encoder's sine encoding (the level embedding, which carries no
# spatial position, stays). A control beyond both papers.
_base_ = './dino-4scale-sine_r50_8xb2-12e_coco.py'

model = dict(encoder_pos='none', level_embed=True)
