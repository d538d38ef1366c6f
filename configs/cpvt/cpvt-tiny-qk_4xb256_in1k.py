# CPVT-Ti with the PEG on the queries and keys only: CPVT [L] §5.1 (71.3 top-1, against 72.4
# with the PEG on Q, K and V and 68.2 without position encoding): "only adding it when
# calculating Q and K in the attention layer, so that only the positional information of PEG
# is passed through". The paper does not detail the wiring; here the layer after the PEG
# computes its queries and keys from X + F(X) and its values and residual from X, so the
# tokens never carry F(X) (mmposenc.CPVT peg_on='qk').
_base_ = ['cpvt-tiny_4xb256_in1k.py']

model = dict(backbone=dict(peg_on='qk'))
