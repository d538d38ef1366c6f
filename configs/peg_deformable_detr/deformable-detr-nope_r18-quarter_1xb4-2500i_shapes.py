# The demo without any position encoding in the encoder (CPVT Table 4 "DD w/o PE"); the learnt
# level embedding still tells the levels apart. Everything else is identical to
# deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py.
_base_ = './deformable-detr-sine_r18-quarter_1xb4-2500i_shapes.py'

model = dict(encoder_pos='none', level_embed=True)
