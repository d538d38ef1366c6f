"""Rotary encoder positions (encoder_pos='rope_mixed' / 'rope_dinov3', alone and +peg) in
DETR, Conditional-DETR and DAB-DETR: padding-exact (an image alone = the same image in a padded
batch, on its own cells), the rotary attention equals the stock attention at zero angles, the
state dict is the stock one plus the learnt frequencies, every mode trains and predicts, and
the deformable hosts refuse them in one line."""
import copy

import pytest
import torch
from tiny_detr_cfgs import (build, conditional_detr_cfg, dab_detr_cfg, deformable_detr_cfg,
                            detr_cfg, dino_cfg, packed_inputs, pixel_decoder_cfg, randomise_pegs,
                            samples_on_grid)

pytest.importorskip('mmdet')

HOSTS = {
    'detr': ('mmposenc.PEGDETR', detr_cfg),
    'conditional': ('mmposenc.PEGConditionalDETR', conditional_detr_cfg),
    'dab': ('mmposenc.PEGDABDETR', dab_detr_cfg),
}
ROTARY = ('rope_mixed', 'rope_dinov3', 'rope_mixed+peg', 'rope_dinov3+peg')


def make(host, **kwargs):
    type_, cfg = HOSTS[host]
    return build(cfg(type=type_, **kwargs))


def encode(model, feat, sizes, grid):
    enc, _ = model.pre_transformer((feat, ), samples_on_grid(sizes, grid))
    return model.forward_encoder(**enc)['memory']


@pytest.mark.parametrize('encoder_pos', ROTARY)
@pytest.mark.parametrize('host', ['detr', 'dab'])
def test_encoder_output_is_padding_exact(host, encoder_pos):
    """The encoder memory of each image of a padded batch, on its own cells, equals that of
    the image alone (DINOv3: coordinates normalised over each image's own extent)."""
    torch.manual_seed(1)
    pegs = dict(peg_after=(0, )) if 'peg' in encoder_pos else {}
    model = make(host, encoder_pos=encoder_pos, **pegs)
    if pegs:
        randomise_pegs(model)
    if encoder_pos.startswith('rope_mixed'):
        with torch.no_grad():
            model.rope.freqs.normal_()
    model.eval()
    gen = torch.Generator().manual_seed(2)
    sizes, grid = [(5, 3), (2, 6), (5, 6)], (5, 6)
    feat = torch.randn(3, 32, *grid, generator=gen)
    with torch.no_grad():
        memory = encode(model, feat, sizes, grid).view(3, *grid, -1)
        for i, (h, w) in enumerate(sizes):
            alone = encode(model, feat[i:i + 1, :, :h, :w].contiguous(), [(h, w)], (h, w))
            assert (memory[i, :h, :w] - alone.view(h, w, -1)).abs().max() <= 1e-5, (i, h, w)


@pytest.mark.parametrize('host', list(HOSTS))
def test_zero_angles_give_the_stock_attention(host):
    """RoPE-Mixed with zero frequencies rotates nothing: the rotary attention must then
    compute exactly what mmdet's attention computes without positions ('none'), padded batch
    included (the key padding mask is applied)."""
    torch.manual_seed(0)
    rope = make(host, encoder_pos='rope_mixed').eval()
    torch.manual_seed(0)
    none = make(host, encoder_pos='none').eval()
    missing, unexpected = rope.load_state_dict(none.state_dict(), strict=False)
    assert missing == ['rope.freqs'] and not unexpected
    with torch.no_grad():
        rope.rope.freqs.zero_()
        feat = torch.randn(2, rope.encoder.embed_dims, 4, 5)
        a = encode(rope, feat, [(4, 5), (3, 2)], (4, 5))
        b = encode(none, feat, [(4, 5), (3, 2)], (4, 5))
        assert torch.allclose(a, b, atol=1e-5)
        rope.rope.reset_parameters()  # the rotation is really applied
        assert not torch.allclose(encode(rope, feat, [(4, 5), (3, 2)], (4, 5)), b, atol=1e-3)


@pytest.mark.parametrize('host,encoder_pos', [('detr', 'rope_mixed'),
                                              ('conditional', 'rope_dinov3+peg'),
                                              ('dab', 'rope_mixed+peg'),
                                              ('detr', 'rope_dinov3')])
def test_modes_train_and_predict(host, encoder_pos):
    torch.manual_seed(3)
    model = make(host, encoder_pos=encoder_pos)
    assert len(model.encoder.pegs) == (1 if 'peg' in encoder_pos else 0)
    inputs = packed_inputs([(3, 64, 96), (3, 96, 64)], num_items=[2, 3])
    losses = model(**model.data_preprocessor(inputs, True), mode='loss')
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    for name, p in model.named_parameters():
        # DAB-DETR's encoder scales position embeddings; rotary modes have none to scale
        if p.requires_grad and not name.startswith(('backbone', 'encoder.query_scale')):
            assert p.grad is not None, name
    if encoder_pos.startswith('rope_mixed'):
        assert model.rope.freqs.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        preds = model(**model.data_preprocessor(inputs, False), mode='predict')
    assert len(preds) == 2 and preds[0].pred_instances.bboxes.shape[-1] == 4


def test_rope_cfg_reaches_the_encoding_and_bad_configs_fail():
    model = make('detr', encoder_pos='rope_dinov3', rope_cfg=dict(rescale_coords=None, base=10.))
    assert model.rope.rescale_coords is None and model.rope.base == 10.
    assert model.rope.num_heads == 4 and model.rope.embed_dims == 32
    mixed = make('detr', encoder_pos='rope_mixed')
    assert mixed.rope.freqs.shape == (2, 2, 4, 4)  # (x / y, encoder layers, heads, pairs)
    with pytest.raises(ValueError, match="rope_cfg=.* has no effect with encoder_pos='sine'"):
        make('detr', encoder_pos='sine', rope_cfg=dict(theta=100.))
    with pytest.raises(ValueError, match='does not match'):
        make('detr', encoder_pos='rope_mixed', rope_cfg=dict(type='mmposenc.DINOv3RoPE'))


@pytest.mark.parametrize('cfg', [
    lambda: deformable_detr_cfg(type='mmposenc.PEGDeformableDETR', encoder_pos='rope_mixed'),
    lambda: dino_cfg(type='mmposenc.PEGDINO', encoder_pos='rope_dinov3+peg'),
    lambda: pixel_decoder_cfg('mmposenc.PEGMSDeformAttnPixelDecoder', encoder_pos='rope_mixed'),
], ids=['deformable_detr', 'dino', 'mask2former_pixel_decoder'])
def test_deformable_hosts_refuse_rotary_modes(cfg):
    with pytest.raises(ValueError, match=r'^PEG\w+: .*deformable attention .*no q.k'):
        build(copy.deepcopy(cfg()))


@pytest.mark.parametrize('encoder_pos', ['rope_mixed', 'rope_dinov3+peg'])
def test_detr_exports_real_valued_onnx_with_dynamic_size(encoder_pos, tmp_path):
    """tools/deployment/pytorch2onnx.py: exported at 96 x 128, onnxruntime matches PyTorch at
    two sizes that are not multiples of the stride; no complex tensor in the graph."""
    import os.path as osp
    import sys
    pytest.importorskip('onnxruntime')
    onnx = pytest.importorskip('onnx')
    from conftest import REPO_ROOT
    sys.path.insert(0, osp.join(REPO_ROOT, 'tools', 'deployment'))
    import pytorch2onnx as p2o
    torch.manual_seed(0)
    model = make('detr', encoder_pos=encoder_pos)
    if encoder_pos.startswith('rope_mixed'):
        with torch.no_grad():
            model.rope.freqs.normal_()
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'rope.onnx'), shape=(96, 128))
    graph = onnx.load(out).graph
    complex_types = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
    assert not {v.type.tensor_type.elem_type for v in
                list(graph.value_info) + list(graph.input) + list(graph.output)} & complex_types
    for row in p2o.check(wrapper, out, [(70, 90), (110, 75)], atol=p2o.DEFAULT_ATOL):
        assert row['ok'], row
