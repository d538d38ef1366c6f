# DETR w/o PE (CPVT Table 4): no position encoding in the encoder; the decoder
# cross-attention keeps the sine memory positions, as in the paper.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(encoder_pos='none')
