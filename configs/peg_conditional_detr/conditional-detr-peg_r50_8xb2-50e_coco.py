# Conditional-DETR-R50 with the encoder's sine encoding replaced by a masked PEG after the first
# encoder layer (CPVT's DETR setting, [E] Table 4 "DETR w/o PE + PEG"); the decoder keeps the
# sine memory positions. Beyond both papers: neither CPVT nor Conditional DETR ran this.
_base_ = './conditional-detr-sine_r50_8xb2-50e_coco.py'

model = dict(
    encoder_pos='peg',
    peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
    peg_cfg=dict(type='mmposenc.MaskedPEG', kernel_size=3))
