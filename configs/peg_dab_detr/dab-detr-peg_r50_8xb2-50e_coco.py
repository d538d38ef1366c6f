# DAB-DETR-R50 with the encoder's sine encoding replaced by a masked PEG after the first encoder
# layer (CPVT's DETR setting); the decoder keeps its sine memory and anchor-box positions.
# Without encoder positions DAB-DETR's position-scaling MLP (encoder.query_scale) has nothing to
# scale and gets no gradient: it stays so that stock checkpoints load, hence
# find_unused_parameters for distributed training. Beyond both papers.
_base_ = './dab-detr-sine_r50_8xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: a MaskedPEG (3x3) after encoder layer 0 (peg_after=(0, ));
    # options go in the mode's value, e.g. encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and
    # are replaced with it: --cfg-options model.encoder_pos=sine is the whole ablation
    encoder_pos='peg')
find_unused_parameters = True  # encoder.query_scale (see above)
