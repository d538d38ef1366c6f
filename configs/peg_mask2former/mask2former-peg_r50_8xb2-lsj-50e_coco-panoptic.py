# Mask2Former-R50 (COCO panoptic segmentation) with the sine encoding of the pixel decoder's encoder
# replaced by a masked PEG per level after its first layer (CPVT's "DD w/o PE + PEG" applied to
# the pixel decoder); the level embedding stays. Beyond both papers.
_base_ = './mask2former-sine_r50_8xb2-lsj-50e_coco-panoptic.py'

model = dict(
    panoptic_head=dict(
        pixel_decoder=dict(
            encoder_pos='peg',
            level_embed=True,
            peg_after=(0, ),  # after encoder layer 0; -1 = before the first layer
            peg_cfg=dict(
                type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False))))
