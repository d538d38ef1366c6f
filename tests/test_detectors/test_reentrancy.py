"""Two threads running ``predict`` on one model at the same time get what each gets alone.

The per-call state our models need deep inside a host's forward (the data samples for the
masked neck, the PEG inputs for the hooks on the encoder layers, the image shapes for
Mask2Former's pixel decoder) is context-local (:class:`mmposenc.models.utils.CallState`), not
stored on the instance, where the second call would overwrite the first one's.
"""
import copy
import threading
import types

import pytest
import torch
from test_encoder_pos_models import (_flat, build_model, encoder_of, is_mask2former,
                                     packed_batch, pixel_decoder_of)
from tiny_detr_cfgs import randomise_pegs

#: two padded batches of different image shapes and batch input shapes
BATCHES = ([(3, 96, 80), (3, 64, 112)], [(3, 70, 50), (3, 128, 90)])


@pytest.mark.parametrize('name', ['PEGDeformableDETR', 'PEGMSDeformAttnPixelDecoder@mmdet'])
def test_concurrent_predicts_on_one_model_equal_sequential_ones(name):
    kwargs = dict(peg_after=(-1, 0))
    if not name.startswith('PEGMSDeform'):
        kwargs['neck'] = dict(type='mmposenc.MaskedChannelMapper', in_channels=[64, 128],
                              kernel_size=1, out_channels=32, act_cfg=None,
                              norm_cfg=dict(type='GN', num_groups=8), num_outs=2)
    model = build_model(name, 'peg', **kwargs).eval()
    encoder = encoder_of(model)
    randomise_pegs(types.SimpleNamespace(encoder=encoder))
    data = [model.data_preprocessor(copy.deepcopy(packed_batch(name, shapes, seed=i)), False)
            for i, shapes in enumerate(BATCHES)]

    def predict(d):
        with torch.no_grad():
            return _flat(model.predict(d['inputs'], copy.deepcopy(d['data_samples'])))

    alone = [predict(d) for d in data]
    # both calls have bound their state before either reads it: one barrier where the state
    # is read for the neck / pixel decoder, one where the PEGs read theirs
    barrier = threading.Barrier(2, timeout=60)

    def wait(*args):
        barrier.wait()  # returns None: the inputs stay

    first = pixel_decoder_of(model) if is_mask2former(model) else model.backbone
    handles = [m.register_forward_pre_hook(wait) for m in (first, encoder.layers[0])]
    results = [None, None]

    def run(i):
        try:
            results[i] = predict(data[i])
        except Exception as err:  # noqa: BLE001 (compared below)
            results[i] = err
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i, )) for i in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        for h in handles:
            h.remove()
    for i in range(2):
        assert not isinstance(results[i], Exception), f'batch {i}: {results[i]!r}'
        assert len(results[i]) == len(alone[i])
        for a, b in zip(alone[i], results[i]):
            assert torch.equal(a, b), f'batch {i}: max diff {(a - b).abs().max()}'
