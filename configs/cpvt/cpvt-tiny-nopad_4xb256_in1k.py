# CPVT-Ti without zero padding: CPVT [E] Table 10 / [L] Table 11 (70.5 top-1 against 72.4 with
# padding). The PEG's 3x3 convolution has no padding, so the 14 x 14 grid becomes 12 x 12 and
# "the input sequence length [shortens] from 196 to 144" ([E] §5.6); every later layer works on
# the 144 patch tokens (+ the class token). The PEG residual adds the centre crop of X.
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(peg_cfg=dict(padding='none')))
