"""CAPE1d / CAPE2d: the plain formula at eval (and CAPE's Appendix A code), train-only
augmentation, the evaluation range gamma of CAPE Table 6, masks, devices."""
import math

import numpy as np
import pytest
import torch

from mmposenc.models.layers import CAPE1d, CAPE2d
from mmposenc.models.layers.encodings.cape import cape2d_frequencies
from mmposenc.registry import MODELS


# ---------------------------------------------------------------- reference formulas
def plain_cape2d(H, W, C, gamma=(1., 1.)):
    """The paper's formula written out with loops, independent of the module: positions on
    [-gamma, gamma] (gamma = 1 but in CAPE Table 6), E[2k-2] = cos(pi (w_kx x + w_ky y)),
    E[2k-1] = sin(...), k = 1 .. C/2, with Appendix A's indexing: rho_k = 10^(2k/C) and the
    angle k - 1."""
    out = torch.zeros(H * W, C, dtype=torch.float64)
    xs = [gamma[1] * (-1 + 2 * c / (W - 1)) if W > 1 else 0. for c in range(W)]
    ys = [gamma[0] * (-1 + 2 * r / (H - 1)) if H > 1 else 0. for r in range(H)]
    for r in range(H):
        for c in range(W):
            for k in range(1, C // 2 + 1):
                rho = 10**(2 * k / C)
                phase = math.pi * (rho * math.cos(k - 1) * xs[c] +
                                   rho * math.sin(k - 1) * ys[r])
                out[r * W + c, 2 * k - 2] = math.cos(phase)
                out[r * W + c, 2 * k - 1] = math.sin(phase)
    return out


def appendix_a_cape_2d(n_patches, n_channels):
    """Our transcription of CAPE's Appendix A ``CAPE_2d`` without augmentation (numpy, as
    there): a [1, n, n] grid with x along the first and y along the second grid axis,
    output [1, n, n, C] = all cosines, then all sines."""
    x = np.zeros([1, n_patches, n_patches])
    y = np.zeros([1, n_patches, n_patches])
    x += np.linspace(-1, 1, n_patches)[None, :, None]
    y += np.linspace(-1, 1, n_patches)[None, None, :]
    half_channels = n_channels // 2
    rho = 10**(np.arange(1, half_channels + 1) / half_channels)
    w_x = rho * np.cos(np.arange(half_channels))
    w_y = rho * np.sin(np.arange(half_channels))
    phase = np.pi * (w_x * x[:, :, :, None] + w_y * y[:, :, :, None])
    return np.concatenate([np.cos(phase), np.sin(phase)], axis=-1)


def plain_cape1d(T, C, normalize=False, valid=None):
    valid = T if valid is None else valid
    mean = (valid - 1) / 2 if normalize else 0.
    out = torch.zeros(T, C, dtype=torch.float64)
    for t in range(valid):
        for k in range(C // 2):
            w = 10000**(-2 * k / C)
            out[t, 2 * k] = math.sin((t - mean) * w)
            out[t, 2 * k + 1] = math.cos((t - mean) * w)
    return out


# ------------------------------------------------------------------------- CAPE2d
@pytest.mark.parametrize('hw', [(7, 7), (3, 5), (1, 4), (1, 1)])
def test_cape2d_eval_is_plain_formula_and_deterministic(hw):
    cape = CAPE2d(16).eval()
    a = cape(hw, batch_size=2)
    b = cape(hw, batch_size=2)
    assert torch.equal(a, b)
    ref = plain_cape2d(*hw, 16).float()
    torch.testing.assert_close(a[0], ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[1], ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize('n,C', [(14, 768), (5, 16), (2, 2)])
def test_cape2d_eval_equals_appendix_a_code(n, C):
    """The frequencies are indexed as in Appendix A (rho over k = 1..C/2, angles 0..C/2-1).
    Appendix A puts x on the first grid axis and concatenates cosines and sines; we put x
    along the width (row-major tokens) and interleave cos/sin as the paper's text writes
    E_2k, E_2k+1: the same numbers, reordered."""
    ref = torch.from_numpy(appendix_a_cape_2d(n, C))[0]  # [x index, y index, C]
    ref = ref.transpose(0, 1).reshape(n * n, C)  # token (row y, column x)
    half = C // 2
    ref = torch.stack((ref[:, :half], ref[:, half:]), dim=-1).flatten(1)  # interleave
    ours = CAPE2d(C).double().eval()((n, n))[0]
    assert (ours - ref).abs().max() < 1e-5  # the frequencies are stored in float32
    w_x, w_y = cape2d_frequencies(C)
    rho = (w_x**2 + w_y**2).sqrt()
    assert math.isclose(rho[0].item(), 10**(2 / C), rel_tol=1e-6)  # k = 1, not 10^0
    assert math.isclose(rho[-1].item(), 10., rel_tol=1e-6)  # k = C/2
    assert w_y[0] == 0 and w_x[0] > 0  # angle 0 for k = 1


def test_cape2d_augmentation_changes_train_output_only():
    cape = CAPE2d(16)  # ViT defaults: shift 0.5, local 1/N, scaling 1.4
    plain = cape.eval()((4, 4), batch_size=3)
    cape.train()
    g = torch.Generator().manual_seed(0)
    aug1 = cape((4, 4), batch_size=3, generator=g)
    aug2 = cape((4, 4), batch_size=3, generator=g)
    assert not torch.allclose(aug1, plain, atol=1e-3)
    assert not torch.allclose(aug1, aug2, atol=1e-3)  # fresh noise every call
    assert not torch.allclose(aug1[0], aug1[1], atol=1e-3)  # per-image noise
    # seedable: the same generator state gives the same augmentation
    again = cape((4, 4), batch_size=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(again, aug1)
    # zero augmentation ranges: training output is the plain one
    still = CAPE2d(16, max_global_shift=0, max_local_shift=0, max_global_scaling=1).train()
    torch.testing.assert_close(still((4, 4), batch_size=3), plain)


@pytest.mark.parametrize('which', ['shift', 'local', 'scale'])
def test_cape2d_each_augmentation_is_what_it_says(which):
    """The augmented positions have the structure of each augmentation."""
    kw = dict(max_global_shift=0., max_local_shift=0., max_global_scaling=1.)
    kw.update({'shift': dict(max_global_shift=0.3), 'local': dict(max_local_shift=0.05),
               'scale': dict(max_global_scaling=1.2)}[which])
    cape = CAPE2d(8, **kw).train()
    x_aug, _ = cape.positions((3, 5), 4, generator=torch.Generator().manual_seed(1))
    x_ref, _ = cape.eval().positions((3, 5), 4)
    diff, ratio = x_aug - x_ref, x_aug / torch.where(x_ref == 0, 1., x_ref)
    if which == 'shift':  # one constant per image, within +-0.3
        assert torch.allclose(diff, diff[:, :1].expand_as(diff))
        assert diff.abs().max() <= 0.3 and diff.abs().max() > 0
    elif which == 'local':  # per-token noise within +-0.05
        assert diff.abs().max() <= 0.05 and diff.std() > 0
        assert not torch.allclose(diff, diff[:, :1].expand_as(diff))
    else:  # one factor per image within [1/1.2, 1.2]
        nz = x_ref != 0
        r = ratio[0][nz[0]]
        assert torch.allclose(r, r[:1].expand_as(r))
        assert (ratio[nz] >= 1 / 1.2 - 1e-6).all() and (ratio[nz] <= 1.2 + 1e-6).all()


@pytest.mark.parametrize('gamma', [0.5, 'linear', 'sqrt'])
def test_cape2d_eval_pos_range_gamma(gamma):
    """CAPE Table 6: at evaluation positions span [-gamma, gamma] per axis with gamma a number,
    N / N_train ('linear', the paper's r / 224) or sqrt(N / N_train); training ignores it."""
    train_hw, hw = (14, 14), (10, 20)  # e.g. 160 x 320 px seen by a model trained at 224
    cape = CAPE2d(32, eval_pos_range=gamma, grid_size=train_hw).eval()
    if gamma == 0.5:
        g = (0.5, 0.5)
    else:
        g = tuple(n / t for n, t in zip(hw, train_hw))
        g = g if gamma == 'linear' else tuple(math.sqrt(v) for v in g)
    torch.testing.assert_close(cape(hw)[0], plain_cape2d(*hw, 32, gamma=g).float(),
                               atol=1e-5, rtol=1e-5)
    x, y = cape.positions(hw)
    assert math.isclose(x.max().item(), g[1], rel_tol=1e-6)
    assert math.isclose(y.max().item(), g[0], rel_tol=1e-6)
    # gamma = 1 at the training grid for 'linear' / 'sqrt': the plain embedding
    if gamma != 0.5:
        torch.testing.assert_close(cape(train_hw), CAPE2d(32).eval()(train_hw))
    # training positions: [-1, 1] before the augmentation, whatever gamma
    kw = dict(max_global_shift=0., max_local_shift=0., max_global_scaling=1.)
    trained = CAPE2d(32, eval_pos_range=gamma, grid_size=train_hw, **kw).train()
    torch.testing.assert_close(trained(hw), CAPE2d(32).eval()(hw))


def test_cape2d_eval_pos_range_with_a_mask_and_in_pevit():
    """With a padding mask, N is the valid extent of each image; PEViT passes its training
    grid."""
    cape = CAPE2d(16, eval_pos_range='linear', grid_size=(4, 4)).eval()
    mask = torch.ones(1, 6, 8, dtype=torch.bool)
    mask[0, :2, :3] = False  # a 2 x 3 image in a 6 x 8 batch
    emb = cape((6, 8), padding_mask=mask)
    valid = emb[0].view(6, 8, 16)[:2, :3].reshape(6, 16)
    torch.testing.assert_close(valid, plain_cape2d(2, 3, 16, gamma=(2 / 4, 3 / 4)).float(),
                               atol=1e-5, rtol=1e-5)
    from mmposenc.models.backbones import PEViT
    vit = PEViT(arch=dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64),
                img_size=(32, 48), patch_size=4,
                pos_encoding=dict(type='CAPE2d', eval_pos_range='sqrt'))
    assert vit.pos_encodings[0].grid_size == (8, 12)


def test_cape2d_auto_local_shift_is_one_over_n():
    cape = CAPE2d(8, max_global_shift=0., max_local_shift='auto', max_global_scaling=1.)
    x_ref, y_ref = cape.eval().positions((4, 10), 64)
    x_aug, y_aug = cape.train().positions((4, 10), 64, generator=torch.Generator())
    assert (x_aug - x_ref).abs().max() <= 1 / 10 + 1e-6
    assert (x_aug - x_ref).abs().max() > 0.8 / 10  # the bound is actually used
    assert (y_aug - y_ref).abs().max() <= 1 / 4 + 1e-6
    assert (y_aug - y_ref).abs().max() > 0.8 / 4


def test_cape2d_padding_mask():
    """Padded tokens get no embedding and do not move the mean: an image padded to a
    larger grid gets exactly the embedding it gets alone."""
    cape = CAPE2d(16).eval()
    alone = cape((3, 4), batch_size=1)  # 3 x 4 valid
    mask = torch.ones(2, 5, 6, dtype=torch.bool)
    mask[0, :3, :4] = False  # image 0: 3 x 4 in a 5 x 6 padded batch
    mask[1] = False  # image 1: the full 5 x 6
    emb = cape((5, 6), padding_mask=mask.flatten(1))
    assert (emb[0][mask[0].flatten()] == 0).all()
    valid = emb[0].view(5, 6, 16)[:3, :4].reshape(12, 16)
    torch.testing.assert_close(valid, alone[0])
    torch.testing.assert_close(emb[1], cape((5, 6))[0])
    # (B, H, W) masks work as well
    torch.testing.assert_close(cape((5, 6), padding_mask=mask), emb)


def test_cape2d_mask_mean_in_training():
    """With augmentation off except scaling, the valid positions stay centred: the
    padded ones do not enter the mean."""
    cape = CAPE2d(8, max_global_shift=0., max_local_shift=0., max_global_scaling=1.3)
    mask = torch.zeros(3, 4, 6, dtype=torch.bool)
    mask[:, :, 3:] = True  # right half padded
    mask[1, 2:] = True
    x, y = cape.train().positions((4, 6), 3, mask.flatten(1), torch.Generator())
    valid = ~mask.flatten(1)
    for b in range(3):
        assert x[b][valid[b]].mean().abs() < 1e-6
        assert y[b][valid[b]].mean().abs() < 1e-6


def test_cape2d_bad_inputs():
    with pytest.raises(ValueError, match='even'):
        CAPE2d(15)
    with pytest.raises(ValueError, match='max_global_scaling'):
        CAPE2d(16, max_global_scaling=0.5)
    with pytest.raises(ValueError, match='padding_mask'):
        CAPE2d(16)((3, 4), padding_mask=torch.zeros(2, 11, dtype=torch.bool))
    with pytest.raises(ValueError, match='eval_pos_range'):
        CAPE2d(16, eval_pos_range='log', grid_size=(4, 4))
    with pytest.raises(ValueError, match='eval_pos_range'):
        CAPE2d(16, eval_pos_range=0.)
    with pytest.raises(ValueError, match='grid_size'):
        CAPE2d(16, eval_pos_range='linear')


def test_cape2d_device_and_dtype_follow_the_module():
    cape = CAPE2d(16, num_extra_tokens=1).to('meta')
    assert cape.w_x.device.type == 'meta'
    for mode in (True, False):  # the augmentation noise too
        cape.train(mode)
        assert cape((3, 4), batch_size=2).device.type == 'meta'
    mask = torch.zeros(2, 12, dtype=torch.bool, device='meta')
    assert cape((3, 4), padding_mask=mask).device.type == 'meta'
    # a CPU generator still seeds a module elsewhere
    out = cape.train()((3, 4), batch_size=2, generator=torch.Generator().manual_seed(0))
    assert out.device.type == 'meta'
    cape64 = CAPE2d(16).double()
    assert cape64((3, 4)).dtype == torch.float64
    assert cape64.train()((3, 4), generator=torch.Generator()).dtype == torch.float64


def test_cape2d_in_vit_keeps_a_learnable_cls_embedding():
    cape = CAPE2d(16, num_extra_tokens=1).eval()
    x = torch.zeros(2, 1 + 12, 16)
    out = cape.add_to_tokens(x, (3, 4))
    torch.testing.assert_close(out[:, 1:], cape((3, 4), batch_size=2))
    torch.testing.assert_close(out[:, 0], cape.extra_embed[0, 0].expand(2, -1))
    out.sum().backward()
    assert cape.extra_embed.grad is not None and cape.extra_embed.grad.abs().sum() > 0


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_cape2d_add_to_tokens_keeps_the_tokens_dtype_with_several_extra_tokens(dtype):
    """Half-precision tokens (AMP) get the float32 encoding cast to their dtype, two extra
    tokens each their own embedding (mutmut survivors: the casts dropped, the extra tokens'
    expand over one token)."""
    cape = CAPE2d(16, num_extra_tokens=2).eval()
    with torch.no_grad():
        cape.extra_embed.normal_()
    x = torch.zeros(3, 2 + 12, 16, dtype=dtype)
    out = cape.add_to_tokens(x, (3, 4))
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out[:, 2:], cape((3, 4), batch_size=3).to(dtype))
    torch.testing.assert_close(out[:, :2], cape.extra_embed.expand(3, -1, -1).to(dtype))


def test_cape2d_defaults_are_the_papers_vit_setting_and_its_tables_are_not_saved():
    """Delta_max 0.5, eps_max 1/N ('auto'), lambda_max 1.4, evaluation on [-1, 1]
    (docs/methods/cape.md); the frequency tables are rebuilt, not stored in checkpoints; a
    class-token embedding starts at std 0.02 (mutmut survivors: each default changed, the
    buffers persistent, the std)."""
    import inspect
    params = inspect.signature(CAPE2d).parameters
    defaults = {k: params[k].default for k in ('max_global_shift', 'max_local_shift',
                                               'max_global_scaling', 'eval_pos_range',
                                               'num_layers', 'num_extra_tokens')}
    assert defaults == dict(max_global_shift=0.5, max_local_shift='auto',
                            max_global_scaling=1.4, eval_pos_range=1., num_layers=1,
                            num_extra_tokens=0)
    cape = CAPE2d(64)
    assert 'w_x' not in cape.state_dict() and 'w_y' not in cape.state_dict()
    torch.manual_seed(0)
    std = CAPE2d(768, num_extra_tokens=8).extra_embed.std().item()
    assert 0.018 < std < 0.022, std
    with pytest.raises(ValueError, match=r'grid_size must be \(H, W\) with H, W >= 1'):
        CAPE2d(16, eval_pos_range='linear', grid_size=(0, 4))
    CAPE2d(16, eval_pos_range='linear', grid_size=(1, 1))


def test_cape2d_registered():
    assert MODELS.get('CAPE2d') is CAPE2d and MODELS.get('CAPE1d') is CAPE1d


# ------------------------------------------------------------------------- CAPE1d
@pytest.mark.parametrize('normalize', [False, True])
def test_cape1d_eval_is_plain_formula(normalize):
    cape = CAPE1d(12, max_global_shift=3., max_local_shift=0.5, max_global_scaling=1.5,
                  normalize=normalize).eval()
    x = torch.zeros(2, 9, 12)
    out = cape(x)
    assert torch.equal(out, cape(x))
    torch.testing.assert_close(out[1], plain_cape1d(9, 12, normalize).float(), atol=1e-5,
                               rtol=1e-5)


def test_cape1d_boundary_arguments_are_accepted():
    """The smallest valid values (2 channels, no shift, scaling 1) build and equal the plain
    formula at eval (its arguments read back as floats)."""
    cape = CAPE1d(2, max_global_shift=0, max_local_shift=0, max_global_scaling=1).eval()
    assert (cape.max_global_shift, cape.max_local_shift, cape.max_global_scaling) == (0., 0., 1.)
    assert all(type(v) is float for v in (cape.max_global_shift, cape.max_local_shift,
                                          cape.max_global_scaling, cape.pos_scale,
                                          cape.freq_scale))
    torch.testing.assert_close(cape(torch.zeros(1, 5, 2))[0], plain_cape1d(5, 2, False).float(),
                               atol=1e-6, rtol=1e-6)


def test_cape1d_augmentation_train_only_and_seedable():
    cape = CAPE1d(12, max_global_shift=3., max_local_shift=0.5, max_global_scaling=1.5)
    x = torch.zeros(3, 9, 12)
    plain = cape.eval()(x)
    cape.train()
    a = cape(x, generator=torch.Generator().manual_seed(3))
    b = cape(x, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, plain, atol=1e-3)
    assert not torch.allclose(a, cape(x), atol=1e-3)


@pytest.mark.parametrize('normalize', [False, True])
def test_cape1d_mask_first_padded_token_gets_nothing(normalize):
    """gcambara/cape masks ``positions > length`` so the token at index ``length`` (the
    first padded one) still gets an embedding; here every padded token gets zero and the
    valid ones are those of the unpadded sequence (the mean ignores the padding)."""
    cape = CAPE1d(8, normalize=normalize).eval()
    x = torch.zeros(2, 10, 8)
    lengths = torch.tensor([10, 6])
    mask = torch.arange(10)[None] >= lengths[:, None]
    out = cape(x, padding_mask=mask)
    assert (out[1, 6] == 0).all()  # the first padded token
    assert (out[1, 6:] == 0).all()
    assert (out[1, :6] != 0).any(-1).all()
    torch.testing.assert_close(out[1, :6], cape(torch.zeros(1, 6, 8))[0])
    torch.testing.assert_close(out[1], plain_cape1d(10, 8, normalize, valid=6).float(),
                               atol=1e-5, rtol=1e-5)


def test_cape1d_device_follows_the_module():
    cape = CAPE1d(8, max_global_shift=1., max_local_shift=0.1, max_global_scaling=1.2,
                  normalize=True).to('meta')
    x = torch.zeros(2, 5, 8, device='meta')
    mask = torch.zeros(2, 5, dtype=torch.bool, device='meta')
    for mode in (True, False):
        assert cape.train(mode)(x, padding_mask=mask).device.type == 'meta'


def test_cape1d_bad_inputs():
    with pytest.raises(ValueError, match='even'):
        CAPE1d(7)
    with pytest.raises(ValueError, match='max_global_shift'):
        CAPE1d(8, max_global_shift=-1)
    with pytest.raises(ValueError, match='padding_mask'):
        CAPE1d(8)(torch.zeros(2, 5, 8), padding_mask=torch.zeros(2, 4, dtype=torch.bool))


# ------------------------------------------------------------- half-precision modules
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('train', [False, True])
def test_cape2d_cast_to_half_matches_float32_at_a_large_grid(dtype, train):
    """``model.to(torch.bfloat16)`` (no autocast) casts the frequency buffers: positions,
    augmentation and phases are still computed in float32, so the half module returns the
    float32 module's embedding rounded to its dtype. With the positions in bf16, column
    indices above 256 are not representable (arange(300) has repeats) and the phases
    (up to ~60 rad) are off by ~0.1 rad."""
    H, W = 40, 300
    cape32 = CAPE2d(64).train(train)
    cape_h = CAPE2d(64).to(dtype).train(train)
    mask = torch.zeros(2, H, W, dtype=torch.bool)
    mask[1, :, 290:] = True
    mask[1, 37:] = True
    ref = cape32((H, W), padding_mask=mask, generator=torch.Generator().manual_seed(0))
    out = cape_h((H, W), padding_mask=mask, generator=torch.Generator().manual_seed(0))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.to(dtype).float(), atol=1e-2, rtol=0)


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
@pytest.mark.parametrize('train', [False, True])
def test_cape1d_cast_to_half_matches_float32_on_a_long_sequence(dtype, train):
    """As for CAPE2d: a 1000-token sequence in a bf16/fp16-cast CAPE1d (positions up to
    1000, not representable in bf16 beyond 256) equals the float32 embedding rounded."""
    kw = dict(max_global_shift=3., max_local_shift=0.5, max_global_scaling=1.5,
              normalize=True)
    cape32, cape_h = CAPE1d(32, **kw).train(train), CAPE1d(32, **kw).to(dtype).train(train)
    mask = torch.zeros(2, 1000, dtype=torch.bool)
    mask[1, 900:] = True
    ref = cape32(torch.zeros(2, 1000, 32), padding_mask=mask,
                 generator=torch.Generator().manual_seed(0))
    out = cape_h(torch.zeros(2, 1000, 32, dtype=dtype), padding_mask=mask,
                 generator=torch.Generator().manual_seed(0))
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref.to(dtype).float(), atol=1e-2, rtol=0)


def test_cape_float32_and_float64_modules_keep_their_buffers_and_dtype():
    """The half-precision path does not touch float32 / float64 modules: their outputs are
    computed from their own frequency buffers, in their own dtype."""
    cape = CAPE2d(16).eval()
    x, y = cape.positions((3, 4))
    from mmposenc.models.layers.encodings.cape import cape2d_embedding
    assert torch.equal(cape((3, 4)), cape2d_embedding(x, y, cape.w_x, cape.w_y))
    assert CAPE2d(16).double()((3, 4)).dtype == torch.float64
    assert CAPE1d(8).double()(torch.zeros(1, 5, 8)).dtype == torch.float64


@pytest.mark.parametrize('gamma', ['linear', 'sqrt'])
@pytest.mark.parametrize('train_hw, hw', [((7, 14), (14, 14)), ((14, 7), (10, 21))])
def test_cape2d_eval_pos_range_axes_on_a_non_square_training_grid(gamma, train_hw, hw):
    """gamma per axis compares each axis with the same axis of the training grid: x (width)
    with grid_size[1], y (height) with grid_size[0]. A square training grid cannot tell the
    axes apart; a 7 x 14 one gives gamma_y = 2, gamma_x = 1 on a 14 x 14 grid."""
    cape = CAPE2d(32, eval_pos_range=gamma, grid_size=train_hw).eval()
    g = tuple(n / t for n, t in zip(hw, train_hw))
    g = g if gamma == 'linear' else tuple(math.sqrt(v) for v in g)
    x, y = cape.positions(hw)
    assert math.isclose(x.max().item(), g[1], rel_tol=1e-6)
    assert math.isclose(y.max().item(), g[0], rel_tol=1e-6)
    torch.testing.assert_close(cape(hw)[0], plain_cape2d(*hw, 32, gamma=g).float(),
                               atol=1e-5, rtol=1e-5)
