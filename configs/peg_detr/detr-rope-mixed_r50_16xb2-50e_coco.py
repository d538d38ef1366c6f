# DETR with RoPE-Mixed in the encoder (Heo et al., "Rotary Position Embedding for Vision
# Transformer", ECCV 2024, arXiv:2403.13298; the paper has no detection experiments and its
# authors released no detection code): the encoder's additive 2D sine encoding is removed and the
# queries and keys of every encoder self-attention are rotated by learnt per-layer, per-head 2D
# frequencies (theta 10, random direction per head: the paper's initialisation). The encoder has
# no class token, so every token is rotated; padded cells are masked as keys. The decoder
# cross-attention keeps the sine memory positions. Same CPVT 50-epoch recipe as the sine config.
_base_ = './detr-sine_r50_16xb2-50e_coco.py'

model = dict(
    # the mode with its defaults: mmposenc.RoPEMixed (theta=10.0, rotate=True; embed_dims /
    # num_heads / num_layers of the encoder); other options go in the mode's value, e.g.
    # encoder_pos=dict(mode='rope_mixed', rope_cfg=dict(type='mmposenc.RoPEMixed', theta=100.))
    encoder_pos='rope_mixed')

# the paper keeps its frequencies out of weight decay (its no_weight_decay set)
optim_wrapper = dict(paramwise_cfg=dict(custom_keys={'rope.freqs': dict(decay_mult=0.0)}))
