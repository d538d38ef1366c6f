# Semantic FPN with CPVT-S-GAP (or CPVT-S) pretrained on ImageNet, ADE20K 512x512: the recipe
# of configs/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py (PVT's: 8 x 4 images, 40k
# iterations, AdamW lr 2e-4, weight decay 1e-4, poly 0.9 to 0), inherited, with the backbone
# and neck swapped. The outputs of layers 2, 5, 8 and 11 (stride 16) are rescaled to strides
# 4/8/16/32 by mmposenc.SimplePyramid (mmseg's BEiT / ViT + MultiLevelNeck way) before FPN.
_base_ = ['../pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models', 'mmposenc.models.detectors'],
                      allow_failed_imports=False)

# Padding-exact mode on (issue 20): CPVT's and SimplePyramid's maps of each image in a padded
# batch (test batches of images of different sizes; training crops smaller than 512 x 512,
# padded by the data preprocessor) are those of the image alone. Measured cost, exact / stock
# in one process (tools/benchmark/padding_exact_cost.py --configs, --clock cpu, 1 thread,
# ADE20K sample): train step 0.952 (a padded 384 x 512 crop pair), predict 1.005 (512 x 683 +
# 512 x 703). mmseg's FPN and FPNHead stay the host's: they read the padding, so the logits are
# not yet exact end to end. The one switch: model = dict(padding_exact=False) is the stock
# computation (same state dict: checkpoints load both ways).
embed_dims = 384
model = dict(
    # mmseg's EncoderDecoder binding each image's size for the padding-exact backbone and
    # handing SimplePyramid the padding masks of CPVT's maps
    type='mmposenc.PaddingExactEncoderDecoder',
    # mmseg's SegDataPreProcessor that also batches test images of different sizes (padded at
    # the bottom / right to the largest; one image stays unpadded, as mmseg's)
    data_preprocessor=dict(type='mmposenc.BatchPaddingSegDataPreprocessor',
                           test_cfg=dict(size_divisor=1)),
    backbone=dict(
        _delete_=True,
        type='mmposenc.CPVT',  # CPVT
        arch='small',
        padding_exact=True,  # False: the stock computation, padding seen as image
        # PEGs after layers 0-4, as CPVT-S-GAP (cpvt-small-gap_4xb256_in1k.py); for a
        # checkpoint of cpvt-small_4xb256_in1k.py (one PEG) set peg_positions=(0, )
        peg_positions=(0, 1, 2, 3, 4),
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        drop_path_rate=0.1,
        # ImageNet weights: the checkpoint tools/train.py writes for cpvt-small-gap_4xb256_in1k.py
        init_cfg=dict(type='Pretrained', prefix='backbone.',
                      checkpoint='work_dirs/cpvt-small-gap_4xb256_in1k/epoch_300.pth')),
    neck=[
        dict(type='mmposenc.SimplePyramid', in_channels=embed_dims,
             scales=(4, 2, 1, 0.5),  # strides 16 -> 4, 8, 16, 32
             padding_exact=True),
        dict(type='FPN', in_channels=[embed_dims] * 4, out_channels=256, num_outs=4),
    ])

# the base's custom key 'backbone.pegs' (no weight decay) names CPVT.pegs as well
