# A small Conditional-DETR on the demo's synthetic shapes_coco: the demo-sized DETR beside it
# (detr-sine_r18-quarter_1xb4-2500i_shapes.py: same data, pipelines, backbone cut at stride 16,
# neck, 2 + 2 layers of width 64, 20 queries, encoder, AdamW and schedule) with Conditional-DETR's
# decoder and head (Meng et al., ICCV 2021): conditional cross-attention whose spatial query is a
# sine of each query's reference point, a sigmoid focal classification loss (weight 2) and focal
# matching cost, as mmdet's conditional-detr_r50_8xb2-50e_coco.py. mmdet's decoder encodes the
# reference points at 256 channels whatever the width; ref_sine_feats='embed_dims' encodes them
# at embed_dims // 2 per axis (64 channels here), the only change to mmdet's model. Used by the
# detection resolution study (projects/detection_resolution, issue 23.2) with
# encoder_pos 'sine', 'peg' and 'rope_mixed'.
_base_ = './detr-sine_r18-quarter_1xb4-2500i_shapes.py'

embed_dims = 64

model = dict(
    type='mmposenc.PEGConditionalDETR',  # mmposenc.models.detectors.PEGConditionalDETR
    encoder_pos='sine',
    ref_sine_feats='embed_dims',  # the decoder's reference-point sine at the model's width
    decoder=dict(  # ConditionalDetrTransformerDecoder (its forward made width-correct)
        layer_cfg=dict(  # ConditionalDetrTransformerDecoderLayer
            self_attn_cfg=dict(_delete_=True, embed_dims=embed_dims, num_heads=4,
                               attn_drop=0.0, cross_attn=False),  # ConditionalAttention
            cross_attn_cfg=dict(_delete_=True, embed_dims=embed_dims, num_heads=4,
                                attn_drop=0.0, cross_attn=True))),  # ConditionalAttention
    bbox_head=dict(  # ConditionalDETRHead
        type='ConditionalDETRHead',
        loss_cls=dict(_delete_=True, type='FocalLoss', use_sigmoid=True, gamma=2.0, alpha=0.25,
                      loss_weight=2.0)),
    train_cfg=dict(
        assigner=dict(
            type='HungarianAssigner',
            match_costs=[
                dict(type='FocalLossCost', weight=2.0),
                dict(type='BBoxL1Cost', weight=5.0, box_format='xywh'),
                dict(type='IoUCost', iou_mode='giou', weight=2.0)
            ])))
