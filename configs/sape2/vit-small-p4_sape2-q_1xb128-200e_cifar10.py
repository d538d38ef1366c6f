# ViT-S with SaPE2 (Q mode) on CIFAR-10, patch size 4 on 32 x 32 images (8 x 8 = 64 patches),
# the setting of the SaPE2 paper: SaPE2 biases in every attention layer, no other encoding.
# Recipe: AdamW lr 5e-4 * batch / 512, weight decay 0.05, 200 epochs cosine with 10 warm-up
# epochs, label smoothing 0.1, random crop + flip.
_base_ = [
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    'mmpretrain::_base_/default_runtime.py',
]

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='mmposenc.PEViT',  # PEViT
        arch='small',
        img_size=32,
        patch_size=4,
        drop_path_rate=0.1,
        out_type='cls_token',
        pos_encoding=dict(type='mmposenc.SaPE2', mode='q', max_rel_pos=16)),  # SaPE2
    neck=None,
    head=dict(
        type='VisionTransformerClsHead',
        num_classes=10,
        in_channels=384,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')))

train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=5e-4 * 128 / 512, weight_decay=0.05),
    clip_grad=dict(max_norm=5.0),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),  # SaPE2.pos_embed_x/_y, LearnableAbsolutePE
        }))

param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, end=10,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=10)
]

train_cfg = dict(by_epoch=True, max_epochs=200, val_interval=10)
val_cfg = dict()
test_cfg = dict()
auto_scale_lr = dict(base_batch_size=128)
