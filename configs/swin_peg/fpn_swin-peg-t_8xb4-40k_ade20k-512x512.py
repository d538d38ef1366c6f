# Semantic FPN with Swin-T + PEG (+GAP-pretrained), ADE20K 512x512: the recipe of
# configs/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py (PVT's: 8 x 4 images, 40k
# iterations, AdamW lr 2e-4, weight decay 1e-4, poly 0.9 to 0), inherited, with the backbone
# swapped.
_base_ = ['../pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models', 'mmposenc.models.detectors'],
                      allow_failed_imports=False)

# Padding-exact mode on (issue 20): SwinPEG's maps of each image in a padded batch (test
# batches of images of different sizes; training crops smaller than 512 x 512, padded by the
# data preprocessor) are those of the image alone. Measured cost, exact / stock in one process
# (tools/benchmark/padding_exact_cost.py --configs, --clock cpu, 1 thread, ADE20K sample):
# train step 1.021 (a padded 384 x 512 crop pair), predict 1.002 (512 x 683 + 512 x 703).
# mmseg's FPN neck and FPNHead stay the host's: they read the padding, so the logits are not
# yet exact end to end. The one switch: model = dict(padding_exact=False) is the stock
# computation (same state dict: checkpoints load both ways).
model = dict(
    # mmseg's EncoderDecoder binding each image's size for the padding-exact backbone
    type='mmposenc.PaddingExactEncoderDecoder',
    # mmseg's SegDataPreProcessor that also batches test images of different sizes (padded at
    # the bottom / right to the largest; one image stays unpadded, as mmseg's)
    data_preprocessor=dict(type='mmposenc.BatchPaddingSegDataPreprocessor',
                           test_cfg=dict(size_divisor=1)),
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        drop_path_rate=0.2,
        padding_exact=True,  # False: the stock computation, padding seen as image
        # ImageNet weights: the checkpoint tools/train.py writes for swin-peg-tiny_16xb64_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/swin-peg-tiny_16xb64_in1k/epoch_300.pth')),
    neck=dict(in_channels=[96, 192, 384, 768]))  # FPN

# the base's custom key 'backbone.pegs' (no weight decay) names SwinPEG.pegs as well
