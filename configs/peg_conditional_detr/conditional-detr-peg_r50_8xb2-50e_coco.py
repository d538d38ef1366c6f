# Conditional-DETR-R50 with the encoder's sine encoding replaced by a masked PEG after the first
# encoder layer (CPVT's DETR setting, [E] Table 4 "DETR w/o PE + PEG"); the decoder keeps the
# sine memory positions. Beyond both papers: neither CPVT nor Conditional DETR ran this.
_base_ = './conditional-detr-sine_r50_8xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: a MaskedPEG (3x3) after encoder layer 0 (peg_after=(0, ));
    # options go in the mode's value, e.g. encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and
    # are replaced with it: --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg')
