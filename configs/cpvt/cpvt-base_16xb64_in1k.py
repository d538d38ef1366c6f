# CPVT-B: DeiT-B (768 dims, 12 heads, 12 layers) with one PEG after encoder layer 0; the
# same DeiT recipe as CPVT-Ti (global batch 16 x 64 = 1024).
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(arch='base'), head=dict(in_channels=768))

train_dataloader = dict(batch_size=64)
