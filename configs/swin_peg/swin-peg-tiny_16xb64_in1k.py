# Swin-T + PEG + GAP (CPVT [L] §4.6 and Table 15: 82.3): Swin-T with one PEG after the first
# block of each stage (relative position bias kept), mmpretrain's Swin-T recipe.
_base_ = ['mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py']

custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)

model = dict(
    backbone=dict(
        _delete_=True,
        type='mmposenc.SwinPEG',  # SwinPEG
        arch='tiny',
        out_indices=(3, ),
        drop_path_rate=0.2))

optim_wrapper = dict(
    # mmengine's parameter groups, logged as one line per rule, not one per parameter
    constructor='mmposenc.SummaryOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={
        # the Swin base also names '.absolute_pos_embed', which SwinPEG does not have
        '_delete_': True,
        '.relative_position_bias_table': dict(decay_mult=0.0),
        'backbone.pegs': dict(decay_mult=0.0),  # SwinPEG.pegs
    }))
