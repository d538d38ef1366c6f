"""PerViT as a dense-prediction backbone: out_indices + featmap_scales give the strides
4 / 8 / 16 / 32 mmdet's and mmseg's FPN expect, for any input size (no size constraint)."""
import math

import pytest
import torch

from mmposenc.models.backbones import PerViT

SMALL = dict(embed_dims=[16, 24, 32, 40], depths=[1, 1, 1, 1], num_heads=2,
             stem_channels=[8, 8, 12, 16])
DENSE = dict(out_indices=(0, 1, 2, 3), featmap_scales=(4, 2, 1, 0.5))


def expected_sizes(h, w):
    """Token grid ``ceil(. / 16)`` (four stride-2 3x3 convs, padding 1), times 4, 2, 1 and
    halved with ceil: a stride-32 map is ceil(H / 32) like a conv backbone's."""
    th, tw = math.ceil(h / 16), math.ceil(w / 16)
    return [(4 * th, 4 * tw), (2 * th, 2 * tw), (th, tw),
            (math.ceil(th / 2), math.ceil(tw / 2))]


@pytest.fixture(scope='module')
def model():
    torch.manual_seed(0)
    return PerViT(arch=SMALL, **DENSE).eval()


@pytest.mark.parametrize('hw', [(128, 192), (64, 96), (160, 288)])
def test_strides_4_8_16_32_for_sizes_divisible_by_32(model, hw):
    h, w = hw
    with torch.no_grad():
        outs = model(torch.rand(1, 3, h, w))
    assert [tuple(o.shape[-2:]) for o in outs] == [(h // s, w // s) for s in (4, 8, 16, 32)]
    assert [o.shape[1] for o in outs] == model.out_channels == [24, 32, 40, 40]


@pytest.mark.parametrize('hw', [(100, 150), (33, 47), (17, 250), (16, 16), (1, 1)])
def test_any_input_size_runs(model, hw):
    """Sizes not divisible by 16 or 32, a single token, a single pixel: no padding needed,
    no error; every map has at least one cell."""
    with torch.no_grad():
        outs = model(torch.rand(2, 3, *hw))
    assert [tuple(o.shape[-2:]) for o in outs] == expected_sizes(*hw)
    assert all(torch.isfinite(o).all() for o in outs)


def test_real_arch_channels_and_quarter_scale():
    assert PerViT('tiny', **DENSE).out_channels == [192, 224, 280, 280]
    assert PerViT('small', **DENSE).out_channels == [320, 368, 464, 464]
    assert PerViT('medium', **DENSE).out_channels == [468, 540, 684, 684]
    model = PerViT(arch=SMALL, out_indices=(3, ), featmap_scales=(0.25, )).eval()
    with torch.no_grad():
        out, = model(torch.rand(1, 3, 80, 112))  # 5 x 7 tokens -> ceil(/4)
    assert out.shape[-2:] == (2, 2)


def test_mmdet_fpn_consumes_any_size(model):
    pytest.importorskip('mmdet')
    from mmdet.models.necks import FPN
    fpn = FPN(in_channels=model.out_channels, out_channels=16, start_level=1,
              add_extra_convs='on_input', num_outs=5).eval()  # RetinaNet's neck
    with torch.no_grad():
        outs = fpn(model(torch.rand(1, 3, 100, 150)))
    th, tw = 7, 10
    assert [tuple(o.shape[-2:]) for o in outs] == [(2 * th, 2 * tw), (th, tw), (4, 5), (2, 3),
                                                    (1, 2)]


def test_with_cp_gives_the_same_outputs_and_gradients():
    """Activation checkpointing per block (for 1333 x 800 training) changes nothing but
    memory: same outputs and gradients, stochastic depth included (RNG state replayed)."""
    grads, saved = [], []
    for with_cp in (False, True):
        torch.manual_seed(0)
        model = PerViT(arch=SMALL, drop_path_rate=0.3, with_cp=with_cp, **DENSE).train()
        x = torch.rand(2, 3, 48, 80)
        torch.manual_seed(1)
        nbytes = []

        def pack(t):
            nbytes.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            outs = model(x)
        saved.append(sum(nbytes))
        sum((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() for o in outs).backward()
        grads.append(({n: p.grad.clone() for n, p in model.named_parameters()},
                      [o.detach() for o in outs]))
    (g0, o0), (g1, o1) = grads
    for a, b in zip(o0, o1):
        torch.testing.assert_close(a, b)
    assert g0.keys() == g1.keys()
    for n in g0:
        torch.testing.assert_close(g0[n], g1[n], msg=n)
    assert saved[1] < saved[0] / 2  # the blocks' activations are not kept
    assert 'with_cp=True' in repr(PerViT(arch=SMALL, with_cp=True))
