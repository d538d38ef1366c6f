# Mask2Former-R50 for COCO panoptic segmentation as mmdet trains it (mmdet's config unchanged:
# large-scale jitter crops of 1024 x 1024, AdamW lr 1e-4 weight decay 0.05 (x0.1 at 327,778 and
# 355,092), 368,750 iterations of 16 images = 8 GPUs x 2, about 50 epochs), with the position
# encoding of the pixel decoder's encoder (a 6-layer Deformable-DETR encoder over strides 8-32)
# chosen by encoder_pos. With 'sine' the pixel decoder is mmdet's MSDeformAttnPixelDecoder (same
# state dict; bit-identical on batches with no padded image, tested in
# tests/test_detectors/test_encoder_pos_models.py). On padded batches (crops of images scaled
# below 1024, padded to 1024 by BatchFixedSizePad; test images padded to a multiple of 32) its
# encoder masks the padding, which mmdet's does not. The transformer decoder's level positions are
# mmdet's in every variant of this folder.
_base_ = 'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco-panoptic.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)

# Padding-exact mode on (issue 20): each image of a padded batch (test images of different
# sizes; LSJ training crops smaller than 1024 x 1024) gets from the backbone, the pixel decoder
# and the transformer decoder what it gets alone: the same masks, scores and panoptic
# segmentation (mmdet's fusion runs per image on them). Measured cost, exact / stock in one
# process (tools/benchmark/padding_exact_cost.py --configs, the peg variant, --clock cpu
# --threads 1 --repeats 3 --warmup 0, two COCO128 images at 800 x 1067 + 800 x 1202 through the
# test pipeline, instance annotations: COCO128 has no panoptic ones): predict 0.999
# (repetitions 0.955, 1.045, 0.999). The train step is that of the instance configs
# (mask2former-sine_r50_8xb2-lsj-50e_coco.py: train step 1.012, predict 0.957): the same
# backbone, pixel decoder and transformer decoder, where all the masking is; only the classes
# and targets of the loss differ. The one switch: model = dict(padding_exact=False) in your
# config is mmdet's Mask2Former and ResNet with the head's padding_exact off, bit for bit (the
# pixel decoder's encoder still masks the padding, as above; same state dict: checkpoints load
# both ways).
model = dict(
    # mmdet's Mask2Former binding each image's size for the backbone
    type='mmposenc.PaddingExactMask2Former',
    # mmdet's ResNet (same arguments and state dict; its frozen BatchNorm, norm_eval=True,
    # keeps the backbone exact in training too) keeping to each image's cells
    backbone=dict(type='mmposenc.PaddingExactResNet', padding_exact=True),
    panoptic_head=dict(
        # mmdet's Mask2FormerHead handing each image's shape to the pixel decoder; its
        # padding_exact (default True; False: only the pixel decoder masks the padding) keeps
        # the transformer decoder and the final masks to each image's cells
        type='mmposenc.PaddingExactMask2FormerHead',
        pixel_decoder=dict(
            type='mmposenc.PEGMSDeformAttnPixelDecoder',
            encoder_pos='sine')))  # 'sine' | 'peg' | 'sine+peg' | 'cape' | 'cape+peg' | 'none'

# mmengine's parameter groups, logged as one line per rule, not one per parameter
optim_wrapper = dict(constructor='mmposenc.SummaryOptimWrapperConstructor')
