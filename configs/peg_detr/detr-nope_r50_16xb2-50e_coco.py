# DETR w/o PE: the "DETR w/o PE*" row of CPVT [E] Table 4 (32.8 AP): no position encoding in
# the encoder ("we only change the positional encoding strategy of the encoder part", §4.3);
# the decoder cross-attention keeps the sine memory positions.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(encoder_pos='none')
