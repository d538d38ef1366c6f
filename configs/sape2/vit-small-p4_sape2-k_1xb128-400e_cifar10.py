# SaPE2 (K) on CIFAR-10, no other position encoding (SaPE2 Table 1, "SaPE2"): ViT-S, patch 4,
# 400 epochs, Adam, batch 128 (recipe and our choices where the paper is silent: _base_/).
_base_ = [
    'mmpretrain::_base_/datasets/cifar10_bs16.py',
    '_base_/vit-small-p4_adam-400e_cifar.py',
]

model = dict(head=dict(num_classes=10))

train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = dict(batch_size=128)
