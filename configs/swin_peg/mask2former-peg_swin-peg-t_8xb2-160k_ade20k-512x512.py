# Mask2Former (ADE20K, mmseg's recipe: 512 x 512 crops, AdamW lr 1e-4, 160k iterations of 16
# images = 8 GPUs x 2, poly schedule) on Swin-T + PEG, with a masked PEG per level in the pixel
# decoder's encoder (configs/peg_mask2former/mask2former-peg_r50_8xb2-160k_ade20k-512x512.py),
# exact on padded batches end to end (issue 20): the backbone in its padding-exact mode, bound
# to each image's size by the segmentor, the pixel decoder and the transformer decoder masking
# the padding, the mask logits resized per image. An image gets the same masks and scores alone
# and in any padded batch (tests/test_detectors/test_padding_exact_mask2former.py). Swin-T's
# optimiser rules are those of mmseg's mask2former_swin-t_8xb2-160k_ade20k-512x512.py (backbone
# lr x 0.1, no weight decay on norms and embeddings), plus none on the PEGs.
_base_ = '../peg_mask2former/mask2former-peg_r50_8xb2-160k_ade20k-512x512.py'
custom_imports = dict(
    imports=['mmdet.models', 'mmposenc.models', 'mmposenc.models.detectors'],
    allow_failed_imports=False)

model = dict(
    # mmseg's EncoderDecoder binding each image's size for the padding-exact backbone
    type='mmposenc.PaddingExactEncoderDecoder',
    # mmseg's SegDataPreprocessor that also batches test images of different sizes (padded
    # at the bottom / right to the largest, a multiple of 32), which mmseg's refuses
    data_preprocessor=dict(type='mmposenc.BatchPaddingSegDataPreprocessor'),
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.3,
        padding_exact=True,  # False: the stock computation, padding seen as image
        # ImageNet weights: the checkpoint tools/train.py writes for swin-peg-tiny_16xb64_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/swin-peg-tiny_16xb64_in1k/epoch_300.pth')),
    decode_head=dict(
        in_channels=[96, 192, 384, 768],
        padding_exact=True))  # False: only the pixel decoder masks the padding

backbone_norm_multi = dict(lr_mult=0.1, decay_mult=0.0)
backbone_embed_multi = dict(lr_mult=0.1, decay_mult=0.0)
embed_multi = dict(lr_mult=1.0, decay_mult=0.0)
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'backbone': dict(lr_mult=0.1, decay_mult=1.0),
            # every norm of SwinPEG (the longest matching key wins over 'backbone'): the
            # blocks' norm1 / norm2, the patch merging's and the embedding's, the outputs'
            'norm1.weight': backbone_norm_multi,
            'norm1.bias': backbone_norm_multi,
            'norm2.weight': backbone_norm_multi,
            'norm2.bias': backbone_norm_multi,
            'downsample.norm': backbone_norm_multi,
            'backbone.patch_embed.norm': backbone_norm_multi,
            'backbone.norm': backbone_norm_multi,
            'backbone.pegs': backbone_embed_multi,
            'relative_position_bias_table': backbone_embed_multi,
            'query_embed': embed_multi,
            'query_feat': embed_multi,
            'level_embed': embed_multi,
            'pixel_decoder.encoder.pegs': embed_multi,
        },
        norm_decay_mult=0.0))
