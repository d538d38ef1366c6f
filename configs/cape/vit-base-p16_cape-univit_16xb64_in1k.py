# UniViT (CAPE Sec. 5.1.2): ViT-B/16 + CAPE without global scaling (lambda = 1, "scaling is set
# to lambda = 1"; CAPE Table 3 "UniViT, lambda = 1" is the UniViT of Table 1), trained on
# images resized per batch to a size drawn from 128, 160, ..., 320. The size is drawn by the
# batch sampler and applied by the pipeline's RandomResizedCrop, which crops and resizes the
# source image at that size (a 320 batch is not an upsampled 224 crop). Rest of the recipe:
# the CAPE ViT config (DeiT-B).
# Evaluation: the plain test pipeline at 224; `tools/test.py --tta` averages the logits of the
# views at 192, 224 and 256 (CAPE Sec. 5.1.3, Table 1), each resized from the source image
# (tta_model and tta_pipeline of the CAPE ViT config).
_base_ = ['vit-base-p16_cape_16xb64_in1k.py']

custom_imports = dict(imports=['mmposenc.models', 'mmposenc.datasets'],
                      allow_failed_imports=False)

model = dict(backbone=dict(pos_encoding=dict(max_global_scaling=1.0)))  # lambda = 1

train_dataloader = dict(
    batch_sampler=dict(
        type='mmposenc.RandomResolutionBatchSampler',  # one size per batch
        sizes=list(range(128, 321, 32))),
    dataset=dict(
        _delete_=True,
        type='mmposenc.RandomResolutionDataset',  # sets RandomResizedCrop to that size
        dataset={{_base_.train_dataloader.dataset}}))
