# Deformable-DETR single-scale w/o PE + PEG with the PEG masked as CPVT's own snippet does ([E]
# supplementary B.2, Algorithm 2): conv over the raw padded tokens, BatchNorm over all positions,
# padded tokens put back. The ablation of deformable-detr-peg_r50-ss_16xb2-50e_coco.py (the
# "DD w/o PE + PEG" row of [E] Table 4), whose MultiLevelMaskedPEG is exact on padded batches.
_base_ = './deformable-detr-peg_r50-ss_16xb2-50e_coco.py'

# The options go with the mode (_delete_: the base's encoder_pos is the string 'peg'), so that
# --cfg-options model.encoder_pos=sine replaces them too.
model = dict(
    encoder_pos=dict(
        _delete_=True,
        mode='peg',
        peg_cfg=dict(
            type='mmposenc.MultiLevelMaskedPEG', kernel_size=3, share_weights=False,
            masking='paper')))
