# Mask2Former-R50 (COCO panoptic segmentation) without the sine encoding in the pixel decoder's
# encoder (the level embedding, which carries no spatial position, stays). A control.
_base_ = './mask2former-sine_r50_8xb2-lsj-50e_coco-panoptic.py'

model = dict(panoptic_head=dict(pixel_decoder=dict(encoder_pos='none', level_embed=True)))
