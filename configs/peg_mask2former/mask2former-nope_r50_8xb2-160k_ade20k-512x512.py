# Mask2Former-R50 (ADE20K) without the sine encoding in the pixel decoder's encoder (the level
# embedding stays). A control.
_base_ = './mask2former-sine_r50_8xb2-160k_ade20k-512x512.py'

model = dict(decode_head=dict(pixel_decoder=dict(encoder_pos='none', level_embed=True)))
