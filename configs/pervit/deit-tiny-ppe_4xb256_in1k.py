# DeiT-T + PPE (PerViT Table 2): mmpretrain's DeiT-T recipe and architecture, with PerViT's
# peripheral position encoding added to every attention layer (MHSA -> MPA through the
# additive bias log Phi_p, one shared w_r, peripheral initialisation over the 12 layers).
# The learnable absolute position embedding of DeiT is kept.
_base_ = ['mmpretrain::deit/deit-tiny_4xb256_in1k.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.PEViT',  # PEViT, the mmposenc ViT/DeiT with pluggable encodings
        arch='deit-tiny',
        img_size=224,
        patch_size=16,
        out_type='cls_token',
        pos_encoding=[
            dict(type='mmposenc.LearnableAbsolutePE'),  # DeiT's pos_embed
            dict(type='mmposenc.PeripheralPE', init='peripheral'),  # PeripheralPE
        ]))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,  # also Phi_p's GroupNorms
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),  # LearnableAbsolutePE.pos_embed
        }))
