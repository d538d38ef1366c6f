# DETR-DC5 (dilated C5, stride 16) with its sine encoding, 50 epochs: the "DETR-DC5 50" row of
# CPVT [E] Table 4 (35.3 AP). The paper states one 50-epoch DETR recipe (§4.3) and this config
# uses it (that of detr-sine_r50_16xb2-50e_coco.py); the table does not say which recipe this
# row was trained with and has no DC5 + PEG row.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(backbone=dict(strides=(1, 2, 2, 1), dilations=(1, 1, 1, 2)))
