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

model = dict(
    panoptic_head=dict(
        # mmdet's Mask2FormerHead handing each image's shape to the pixel decoder
        type='mmposenc.PaddingAwareMask2FormerHead',
        pixel_decoder=dict(
            type='mmposenc.PEGMSDeformAttnPixelDecoder',
            encoder_pos='sine')))  # 'sine' | 'peg' | 'sine+peg' | 'cape' | 'cape+peg' | 'none'

# mmengine's parameter groups, logged as one line per rule, not one per parameter
optim_wrapper = dict(constructor='mmposenc.SummaryOptimWrapperConstructor')
