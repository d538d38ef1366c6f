# CPVT-Ti with twelve 1x1 layers instead of the PEG: CPVT [E] Table 11 / [L] Table 5, row
# "1 (12x) learnable" (68.6 top-1, 6.13M parameters): "12 more fully connected layers (i.e.,
# kernel size 1) with skip connections after the first encoder" ([E] §5.7). Here: the PEG with
# twelve dense 1x1 convolutions, each followed by BN + ReLU (the PEG's stacked form), and its
# skip connection around the stack. The paper does not spell out the layer or where its skips
# sit; 12 x (dense 1x1 + bias + BN) is 449,280 weights, which gives its 6.13M (tested).
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(peg_cfg=dict(kernel_size=1, conv_type='dense', num_layers=12)))
