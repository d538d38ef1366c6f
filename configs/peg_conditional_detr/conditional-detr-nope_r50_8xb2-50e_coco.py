# Conditional-DETR-R50 without position information in the encoder (the decoder keeps the sine
# memory positions). A control beyond both papers.
_base_ = './conditional-detr-sine_r50_8xb2-50e_coco.py'

model = dict(encoder_pos='none')
