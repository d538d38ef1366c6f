"""Properties of the Position Encoding Generator (CPVT)."""
import copy

import pytest
import torch
import torch.nn.functional as F

from mmposenc.models.layers import PEG
from mmposenc.registry import MODELS

C = 8


def _tokens(hw, extra=0, b=2, c=C, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, extra + hw[0] * hw[1], c, generator=g)


def _init(peg, seed=0):
    torch.manual_seed(seed)
    peg.init_weights()
    for p in peg.parameters():  # non-zero biases so that they are exercised
        if p.dim() == 1:
            p.data.normal_()
    return peg


def test_registered_and_built_from_config():
    peg = MODELS.build(dict(type='mmposenc.PEG', in_channels=C, num_extra_tokens=1))
    assert isinstance(peg, PEG)
    assert 'in_channels=8' in repr(peg) and "conv_type='depthwise'" in repr(peg)


def test_matches_official_poscnn_formulation():
    """Default PEG == Conv2d(C, C, 3, 1, 1, groups=C)(X) + X on the patch tokens."""
    peg = _init(PEG(C, num_extra_tokens=1))
    hw = (5, 7)
    x = _tokens(hw, extra=1)
    conv = peg.proj[0]
    feat = x[:, 1:].transpose(1, 2).reshape(2, C, *hw)
    ref = F.conv2d(feat, conv.weight, conv.bias, padding=1, groups=C) + feat
    ref = torch.cat([x[:, :1], ref.flatten(2).transpose(1, 2)], dim=1)
    torch.testing.assert_close(peg(x, hw), ref)


@pytest.mark.parametrize('d,k,l', [(192, 3, 1), (192, 5, 1), (64, 3, 2), (384, 7, 3)])
def test_depthwise_weight_count_is_d_l_k2(d, k, l):
    peg = PEG(d, kernel_size=k, num_layers=l, bias=False)
    conv_weights = sum(m.weight.numel() for m in peg.modules()
                       if isinstance(m, torch.nn.Conv2d))
    assert conv_weights == d * l * k * k


def test_cpvt_tiny_peg_has_1728_weights():
    assert sum(p.numel() for p in PEG(192, bias=False).parameters()) == 1728
    assert sum(p.numel() for p in PEG(192).parameters()) == 1728 + 192


def test_separable_and_dense_weight_counts():
    sep = PEG(C, conv_type='separable', bias=False)
    dense = PEG(C, conv_type='dense', bias=False)
    assert sum(p.numel() for p in sep.parameters()) == C * 9 + C * C
    assert sum(p.numel() for p in dense.parameters()) == C * C * 9


@pytest.mark.parametrize('cfg', [
    dict(), dict(kernel_size=5), dict(conv_type='separable'), dict(conv_type='dense'),
    dict(num_layers=3)
])
def test_translation_equivariance_on_interior_tokens(cfg):
    peg = _init(PEG(C, **cfg)).eval()
    hw, (dy, dx) = (16, 16), (2, 3)
    x = _tokens(hw)
    feat = x.transpose(1, 2).reshape(2, C, *hw)
    shifted = torch.roll(feat, (dy, dx), dims=(2, 3)).flatten(2).transpose(1, 2)
    out = peg(x, hw).transpose(1, 2).reshape(2, C, *hw)
    out_shifted = peg(shifted, hw).transpose(1, 2).reshape(2, C, *hw)
    m = peg.num_layers * (peg.kernel_size - 1) // 2 + max(dy, dx)  # border band
    a = torch.roll(out, (dy, dx), dims=(2, 3))[..., m:-m, m:-m]
    b = out_shifted[..., m:-m, m:-m]
    torch.testing.assert_close(a, b)


def test_zero_padding_makes_border_tokens_position_aware():
    """On a constant input the interior outputs are all equal while the border ones
    differ: the zero padding is what tells a token where it is (CPVT [L] §3.2)."""
    peg = _init(PEG(C, residual=False)).eval()
    hw = (6, 6)
    out = peg(torch.ones(1, 36, C), hw).transpose(1, 2).reshape(1, C, *hw)
    interior = out[..., 1:-1, 1:-1]
    torch.testing.assert_close(interior, interior[..., :1, :1].expand_as(interior))
    assert not torch.allclose(out[..., 0, 0], out[..., 2, 2])
    assert not torch.allclose(out[..., 0, 2], out[..., 2, 2])


@pytest.mark.parametrize('hw', [(1, 1), (1, 5), (3, 1), (7, 4), (5, 5), (13, 9), (2, 2)])
@pytest.mark.parametrize('extra', [0, 1, 2])
def test_one_module_any_grid_and_extra_tokens_unchanged(hw, extra):
    peg = _init(PEG(C, num_extra_tokens=extra, num_layers=2)).eval()
    x = _tokens(hw, extra)
    y = peg(x, hw)
    assert y.shape == x.shape
    assert torch.equal(y[:, :extra], x[:, :extra])
    assert torch.isfinite(y).all()
    assert not torch.allclose(y[:, extra:], x[:, extra:])


def test_batch_elements_independent():
    peg = _init(PEG(C)).eval()
    x = _tokens((4, 6), b=3)
    torch.testing.assert_close(peg(x, (4, 6))[1:2], peg(x[1:2], (4, 6)))


@pytest.mark.parametrize('cfg', [
    dict(), dict(conv_type='separable'), dict(conv_type='dense'), dict(num_layers=2),
    dict(padding='none'), dict(stride=2)
])
def test_gradients_reach_every_parameter(cfg):
    peg = _init(PEG(C, num_extra_tokens=1, **cfg)).train()
    x = _tokens((6, 5), extra=1).requires_grad_()
    peg(x, (6, 5)).pow(2).sum().backward()
    for name, p in peg.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad[:, 0].abs().sum() > 0  # the cls token is passed through


def test_frozen_has_no_trainable_parameters_and_keeps_bn_stats():
    peg = _init(PEG(C, num_layers=2, frozen=True)).train()
    assert not any(p.requires_grad for p in peg.parameters())
    bn = peg.proj[1]
    mean = bn.running_mean.clone()
    peg(_tokens((4, 4)) * 5 + 3, (4, 4))
    assert torch.equal(bn.running_mean, mean) and not bn.training


def test_no_padding_shortens_the_sequence_as_in_the_paper():
    """CPVT [E] Table 10 / [L] Table 11: removing the zero padding "shortens the input sequence
    length from 196 to 144": a valid 3x3 convolution on 14 x 14 gives 12 x 12, and the residual
    adds the centre crop of X. No zero is ever read, so no border token is marked."""
    peg = _init(PEG(C, padding='none', num_extra_tokens=1)).eval()
    hw = (14, 14)
    assert peg.out_shape(hw) == (12, 12)
    x = _tokens(hw, extra=1)
    y = peg(x, hw)
    assert x.shape[1] == 1 + 196 and y.shape == (2, 1 + 144, C)
    assert torch.equal(y[:, :1], x[:, :1])  # class token unchanged
    conv = peg.proj[0]
    feat = x[:, 1:].transpose(1, 2).reshape(2, C, *hw)
    ref = F.conv2d(feat, conv.weight, conv.bias, groups=C) + feat[..., 1:-1, 1:-1]
    torch.testing.assert_close(y[:, 1:], ref.flatten(2).transpose(1, 2))
    # the same module on a non-square grid, and a stack of two valid 5x5 layers
    assert peg(_tokens((7, 4), extra=1), (7, 4)).shape == (2, 1 + 5 * 2, C)
    stack = _init(PEG(C, kernel_size=5, num_layers=2, padding='none')).eval()
    assert stack.out_shape((14, 10)) == (6, 2)
    assert stack(_tokens((14, 10)), (14, 10)).shape == (2, 12, C)


def test_no_padding_gives_constant_input_a_constant_output():
    """With zero padding a constant input comes out with a marked border (the paper's source of
    absolute position); without padding every output token is the same."""
    peg = _init(PEG(C, padding='none', residual=False)).eval()
    out = peg(torch.ones(1, 36, C), (6, 6))
    torch.testing.assert_close(out, out[:, :1].expand_as(out))


@pytest.mark.parametrize('hw', [(2, 5), (1, 1), (5, 2)])
def test_no_padding_grid_too_small_raises(hw):
    peg = PEG(C, padding='none')
    with pytest.raises(ValueError, match=r"padding='none' shrinks the grid"):
        peg(_tokens(hw), hw)


def test_no_padding_is_translation_equivariant():
    """Without zero padding the PEG is a valid convolution: a circular shift of the input
    shifts the output wherever no window wraps around."""
    peg = _init(PEG(C, padding='none', residual=False)).eval()
    hw = (10, 10)
    x = _tokens(hw)
    feat = x.transpose(1, 2).reshape(2, C, *hw)
    out = peg(x, hw).transpose(1, 2).reshape(2, C, 8, 8)
    sh = torch.roll(feat, (1, 1), dims=(2, 3)).flatten(2).transpose(1, 2)
    out_sh = peg(sh, hw).transpose(1, 2).reshape(2, C, 8, 8)
    torch.testing.assert_close(out[..., :-1, :-1], out_sh[..., 1:, 1:])


def test_kernel_one_has_no_neighbourhood():
    """Kernel 1 ([E] Table 9, [L] Table 5): every token is encoded from itself only, so a
    permutation of the tokens permutes the output (no position information at all)."""
    peg = _init(PEG(C, kernel_size=1)).eval()
    assert peg.out_shape((5, 6)) == (5, 6)
    x = _tokens((5, 6))
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(peg(x, (5, 6))[:, perm], peg(x[:, perm], (5, 6)))
    assert sum(p.numel() for p in PEG(192, kernel_size=1).parameters()) == 192 + 192


def test_twelve_stacked_dense_1x1_parameter_count():
    """[E] Table 11 / [L] Table 5 "1 (12x)": twelve fully connected (1x1) layers after the first
    encoder, 6.13M parameters in CPVT-Ti against 5.68M for one 3x3 PEG; dense 1x1 + bias + BN
    per layer is 12 * (192 * 192 + 192 + 2 * 192) = 449,280 weights."""
    peg = PEG(192, kernel_size=1, conv_type='dense', num_layers=12)
    assert sum(p.numel() for p in peg.parameters()) == 12 * (192 * 192 + 192 + 2 * 192)
    assert sum(isinstance(m, torch.nn.Conv2d) and m.kernel_size == (1, 1)
               for m in peg.modules()) == 12


@pytest.mark.parametrize('hw,out_hw', [((8, 8), (4, 4)), ((7, 5), (4, 3)), ((1, 1), (1, 1))])
def test_strided_form_downsamples_without_residual(hw, out_hw):
    peg = _init(PEG(C, stride=2, num_extra_tokens=1))
    assert not peg.residual and peg.out_shape(hw) == out_hw
    x = _tokens(hw, extra=1)
    y = peg(x, hw)
    assert y.shape == (2, 1 + out_hw[0] * out_hw[1], C)
    conv = peg.proj[0]
    feat = x[:, 1:].transpose(1, 2).reshape(2, C, *hw)
    ref = F.conv2d(feat, conv.weight, conv.bias, stride=2, padding=1, groups=C)
    torch.testing.assert_close(y[:, 1:], ref.flatten(2).transpose(1, 2))


def test_state_dict_round_trip():
    a = _init(PEG(C, num_extra_tokens=1, num_layers=2), seed=1).eval()
    b = PEG(C, num_extra_tokens=1, num_layers=2).eval()
    b.load_state_dict(copy.deepcopy(a.state_dict()), strict=True)
    x = _tokens((3, 4), extra=1)
    torch.testing.assert_close(a(x, (3, 4)), b(x, (3, 4)))
    assert set(a.state_dict()) == set(b.state_dict())
    assert all(k.startswith('proj.') for k in a.state_dict())


@pytest.mark.parametrize('kwargs,match', [
    (dict(kernel_size=4), r'odd int >= 1'),
    (dict(kernel_size=0), r'odd int >= 1'),
    (dict(kernel_size=2), r'odd int >= 1'),
    (dict(conv_type='grouped'), r"one of \('depthwise', 'separable', 'dense'\)"),
    (dict(padding='reflect'), r"one of \('zeros', 'none'\)"),
    (dict(stride=2, residual=True), r'residual=True needs stride=1'),
    (dict(num_layers=0), r'num_layers must be an int >= 1'),
    (dict(num_extra_tokens=-1), r'num_extra_tokens must be an int >= 0'),
    (dict(kernel_size=3.0), r'odd int >= 1'),
    (dict(stride=2.0), r'stride must be an int >= 1, got 2.0'),
    (dict(stride=0), r'stride must be an int >= 1, got 0'),
])
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PEG(C, **kwargs)


def test_in_channels_must_be_a_positive_int_and_one_is_enough():
    """(mutmut survivors: the check's ``or`` as ``and``, its bound moved to 2.)"""
    for bad in (0, 8.0, '8'):
        with pytest.raises(ValueError, match=r'in_channels must be a positive int'):
            PEG(bad)
    peg = _init(PEG(1)).eval()
    assert peg(_tokens((3, 4), c=1), (3, 4)).shape == (2, 12, 1)


def test_stride_applies_to_the_first_layer_only():
    """A strided stack: the first convolution subsamples, the later ones keep the grid
    (mutmut survivor: every layer strided)."""
    peg = _init(PEG(C, stride=2, num_layers=3)).eval()
    assert peg.out_shape((8, 10)) == (4, 5)
    assert peg(_tokens((8, 10)), (8, 10)).shape == (2, 20, C)


def test_bad_input_raises_naming_expected_value():
    peg = PEG(C, num_extra_tokens=1)
    with pytest.raises(ValueError, match=r'1 \+ 4 \* 4 = 17 tokens, got 16'):
        peg(_tokens((4, 4)), (4, 4))
    with pytest.raises(ValueError, match=r'expects 8 channels \(in_channels\), got 6'):
        peg(_tokens((4, 4), extra=1, c=6), (4, 4))
    with pytest.raises(ValueError, match=r'\(B, N, C\)'):
        peg(torch.zeros(2, C, 4, 4), (4, 4))


@pytest.mark.parametrize('conv_type, layers', [
    ('depthwise', ('dw', )), ('separable', ('dw', 'pw')), ('dense', ('dense', ))])
def test_default_init_std_is_sqrt_2_over_fan_out_per_group(conv_type, layers):
    """The official CPVT / Twins initialisation: N(0, sqrt(2 / fan_out)) with
    fan_out = k * k * out_channels / groups, i.e. sqrt(2 / 9) for a 3x3 depthwise kernel
    whatever C (not sqrt(2 / (9 C)), 16x smaller at C = 256), and zero biases."""
    c, k = 256, 3
    peg = PEG(c, kernel_size=k, conv_type=conv_type)
    torch.manual_seed(0)
    peg.init_weights()
    convs = [m for m in peg.proj.modules() if isinstance(m, torch.nn.Conv2d)]
    fan_out = {'dw': k * k, 'pw': c, 'dense': k * k * c}
    assert len(convs) == len(layers)
    for conv, kind in zip(convs, layers):
        expected = (2.0 / fan_out[kind])**0.5
        std = conv.weight.std().item()
        # >= 2304 samples: the sample std is within 5% of the true one (> 3.4 sigma)
        assert abs(std / expected - 1) < 0.05, (kind, std, expected)
        assert abs(conv.weight.mean().item()) < 0.1 * expected
        assert (conv.bias == 0).all()
