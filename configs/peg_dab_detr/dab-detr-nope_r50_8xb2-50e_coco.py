# DAB-DETR-R50 without position information in the encoder (the decoder keeps its sine memory
# and anchor-box positions; encoder.query_scale is unused, see the PEG config). A control.
_base_ = './dab-detr-sine_r50_8xb2-50e_coco.py'

model = dict(encoder_pos='none')
find_unused_parameters = True  # encoder.query_scale
