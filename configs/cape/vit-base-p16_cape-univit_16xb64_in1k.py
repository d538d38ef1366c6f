# UniViT (CAPE paper): ViT-B/16 + CAPE trained on a random resolution per batch,
# 128, 160, ..., 320 (the preprocessed 224 x 224 crops are resized batch-wise). Evaluate with
# resolution test-time augmentation (mean logits at r - 32, r, r + 32) by running the test
# script with --tta: tta_model wraps the classifier.
_base_ = ['vit-base-p16_cape_16xb64_in1k.py']

model = dict(
    data_preprocessor=dict(  # takes precedence over the base's top-level data_preprocessor
        type='mmposenc.RandomResolutionDataPreprocessor',  # RandomResolutionDataPreprocessor
        preprocessor=dict(
            type='mmpretrain.ClsDataPreprocessor',
            num_classes=1000,
            mean=[123.675, 116.28, 103.53],
            std=[58.395, 57.12, 57.375],
            to_rgb=True),
        sizes=list(range(128, 321, 32))))

tta_model = dict(type='mmposenc.ResolutionTTAClassifier', offsets=(-32, 0, 32))
