# Mask2Former-R50 (COCO instance segmentation) with the sine encoding of the pixel decoder's encoder
# replaced by a masked PEG per level after its first layer (CPVT's "DD w/o PE + PEG" applied to
# the pixel decoder); the level embedding stays. Beyond both papers.
_base_ = './mask2former-sine_r50_8xb2-lsj-50e_coco.py'

model = dict(
    panoptic_head=dict(
        pixel_decoder=dict(
            # the mode with its defaults: a MultiLevelMaskedPEG (3x3, one per level) after encoder
            # layer 0 (peg_after=(0, )); options go in the mode's value, e.g.
            # encoder_pos=dict(mode='peg', peg_after=(-1, 0)), and are replaced with it:
            # --cfg-options model.panoptic_head.pixel_decoder.encoder_pos=sine is the whole ablation
            encoder_pos='peg',
            level_embed=True)))
