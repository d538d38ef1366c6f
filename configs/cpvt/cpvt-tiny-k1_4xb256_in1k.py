# CPVT-Ti with a 1x1 PEG kernel: CPVT [E] Table 9 (68.9 top-1, 5.68M parameters; 72.4 for 3x3):
# a depthwise 1x1 convolution sees no neighbour, so it carries no position.
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(peg_cfg=dict(kernel_size=1)))
