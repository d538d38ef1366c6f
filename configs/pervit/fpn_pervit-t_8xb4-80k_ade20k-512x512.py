# Semantic FPN with a PerViT-T backbone, ADE20K 512 x 512, 80k iterations. Beyond the paper
# (PerViT reports ImageNet only): the PVT / Twins Semantic FPN recipe of mmseg's
# twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py (AdamW lr 1e-4, weight decay
# 1e-4, poly with power 0.9 down to 0, 8 x 4 images). PerViT runs every stage at stride 16;
# `featmap_scales` resamples the four stage outputs to strides 4 / 8 / 16 / 32 for the FPN.
_base_ = ['mmseg::twins/twins_pcpvt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

# Padding-exact mode (issue 20) off: its measured cost is above 3 % (exact / stock in one
# process, tools/benchmark/padding_exact_cost.py --configs --clock cpu, 1 thread, ADE20K
# sample: predict 1.628 on 512 x 683 + 512 x 703, train step 0.688 on a padded 384 x 512 crop
# pair; configs/pervit/README.md). To turn it on (PerViT's maps of each image in a padded batch
# equal to the image alone; the FPN neck and head stay mmseg's):
#   model = dict(type='mmposenc.PaddingExactEncoderDecoder',
#                data_preprocessor=dict(type='mmposenc.BatchPaddingSegDataPreprocessor',
#                                       test_cfg=dict(size_divisor=1)),
#                backbone=dict(padding_exact=True))
#   custom_imports = dict(imports=['mmposenc.models', 'mmposenc.models.detectors'])

# an mmpretrain ImageClassifier checkpoint of ./pervit-tiny_8xb128_in1k.py (or the official
# weights converted by tools/model_converters/pervit_official_to_mmposenc.py)
pretrained = 'checkpoints/pervit-tiny_in1k_mmposenc.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PerViT',  # PerViT
        arch='tiny',
        out_indices=(0, 1, 2, 3),
        featmap_scales=(4, 2, 1, 0.5),  # strides 4, 8, 16, 32
        # stochastic depth: the arch default of the ImageNet recipe (T 0, S 0.1, M 0.2)
        init_cfg=dict(type='Pretrained', checkpoint=pretrained, prefix='backbone.')),
    neck=dict(in_channels=[192, 224, 280, 280]))  # FPN; PerViT.out_channels

# no weight decay on the position encoding: the shared w_r (PerViT.distance_embed), every
# block's Phi_p projections and norms (PerViTBlock.attn.ppe) and the conditional position
# encoding (PerViTBlock.cpe)
optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(
        custom_keys={
            'backbone.distance_embed.': dict(decay_mult=0.0),
            '.attn.ppe.': dict(decay_mult=0.0),
            '.cpe.': dict(decay_mult=0.0),
        }))

# the inherited mmseg schedule_80k decays to eta_min=1e-4, which is its base lr: constant
param_scheduler = [
    dict(type='PolyLR', power=0.9, eta_min=0.0, begin=0, end=80000, by_epoch=False)
]

# mmseg's ADE20KDataset plus mmposenc's dataset check when it is built, before the first
# iteration (mmposenc/datasets/checked.py; tools/misc/check_dataset.py runs the same check)
train_dataloader = dict(dataset=dict(type='mmposenc.CheckedADE20KDataset'))
val_dataloader = dict(dataset=dict(type='mmposenc.CheckedADE20KDataset'))
test_dataloader = val_dataloader
