"""MaskedPEG / MultiLevelMaskedPEG: padding invariance, untouched padding, masked BN, errors."""
import copy
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from mmposenc.models.layers import MaskedPEG, MultiLevelMaskedPEG
from mmposenc.models.layers.generators.masked_peg import batch_norm_rows
from mmposenc.registry import MODELS

TOL = 1e-5


def randomise(module, gen):
    """Non-trivial weights and running statistics (so eval mode tests something)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            m.weight.data.normal_(0, 0.5, generator=gen)
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5, generator=gen)
            m.bias.data.normal_(0, 0.5, generator=gen)
            m.running_mean.normal_(0, 0.5, generator=gen)
            m.running_var.uniform_(0.5, 2.0, generator=gen)
    return module


def padded_batch(sizes, channels, gen):
    """Tokens of images of ``sizes`` padded to a common grid; padding filled with garbage."""
    H = max(h for h, _ in sizes)
    W = max(w for _, w in sizes)
    x = torch.randn(len(sizes), H * W, channels, generator=gen) * 3 + 1
    mask = torch.ones(len(sizes), H, W, dtype=torch.bool)
    for i, (h, w) in enumerate(sizes):
        mask[i, :h, :w] = False
    return x, mask.flatten(1), (H, W)


def crop(tokens, i, hw_shape, size):
    H, W = hw_shape
    h, w = size
    return tokens[i].view(H, W, -1)[:h, :w].reshape(1, h * w, -1)


def random_sizes(gen, max_side=9):
    bs = int(torch.randint(1, 5, (1, ), generator=gen))
    return [tuple(int(v) for v in torch.randint(1, max_side + 1, (2, ), generator=gen))
            for _ in range(bs)]


def test_padding_invariance_eval_many_sizes():
    gen = torch.Generator().manual_seed(0)
    peg = randomise(MaskedPEG(embed_dims=16), gen).eval()
    checked = 0
    for _ in range(60):
        sizes = random_sizes(gen)
        x, mask, hw = padded_batch(sizes, 16, gen)
        out = peg(x, hw, mask)
        # padded positions untouched, bit for bit
        assert torch.equal(out[mask], x[mask])
        for i, size in enumerate(sizes):
            alone = peg(crop(x, i, hw, size), size, None)
            diff = (crop(out, i, hw, size) - alone).abs().max().item()
            assert diff <= TOL, (sizes, i, diff)
            checked += 1
    assert checked > 100


def test_padding_invariance_train_single_image_and_running_stats():
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        h, w = (int(v) for v in torch.randint(2, 8, (2, ), generator=gen))
        H, W = h + int(torch.randint(0, 4, (1, ), generator=gen)), w + 3
        x = torch.randn(1, H * W, 8, generator=gen) * 2
        mask = torch.ones(1, H, W, dtype=torch.bool)
        mask[0, :h, :w] = False
        peg_padded = randomise(MaskedPEG(embed_dims=8), gen).train()
        peg_alone = copy.deepcopy(peg_padded)
        out = peg_padded(x, (H, W), mask.flatten(1))
        alone = peg_alone(crop(x, 0, (H, W), (h, w)), (h, w))
        assert (crop(out, 0, (H, W), (h, w)) - alone).abs().max() <= TOL
        for name in ('running_mean', 'running_var'):
            torch.testing.assert_close(
                getattr(peg_padded.norm, name), getattr(peg_alone.norm, name),
                rtol=1e-5, atol=1e-6)
        assert peg_padded.norm.num_batches_tracked == peg_alone.norm.num_batches_tracked == 1


@pytest.mark.parametrize('momentum', [0.1, None])
@pytest.mark.parametrize('bn_type', [nn.BatchNorm1d, nn.BatchNorm2d])
def test_batch_norm_rows_equals_bn_on_valid_tokens(momentum, bn_type):
    """Train-mode statistics over the gathered valid tokens of a padded batch = a BatchNorm1d
    over those tokens, running statistics included (momentum and cumulative average)."""
    gen = torch.Generator().manual_seed(2)
    bn = bn_type(6, momentum=momentum)
    bn.weight.data.uniform_(0.5, 1.5, generator=gen)
    bn.bias.data.normal_(generator=gen)
    ref = nn.BatchNorm1d(6, momentum=momentum)
    ref.load_state_dict(bn.state_dict())
    for _ in range(3):  # several steps exercise the running-average update
        x = torch.randn(3, 5, 7, 6, generator=gen) * 2 + 1  # channels-last tokens
        valid = torch.rand(3, 5, 7, generator=gen) > 0.4
        torch.testing.assert_close(batch_norm_rows(x[valid], bn), ref(x[valid]), rtol=1e-5,
                                   atol=1e-5)
    torch.testing.assert_close(bn.running_mean, ref.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=1e-5, atol=1e-6)
    assert int(bn.num_batches_tracked) == int(ref.num_batches_tracked) == 3
    bn.eval()
    rows = torch.randn(4, 6, generator=gen)
    torch.testing.assert_close(batch_norm_rows(rows, bn), ref.eval()(rows))


@pytest.mark.parametrize('mode', ['train', 'eval'])
def test_no_mask_path_equals_all_valid_mask(mode):
    gen = torch.Generator().manual_seed(4)
    peg = randomise(MaskedPEG(embed_dims=8), gen)
    peg.train(mode == 'train')
    other = copy.deepcopy(peg)
    x = torch.randn(3, 20, 8, generator=gen)
    out_none = peg(x, (4, 5), None)
    out_mask = other(x, (4, 5), torch.zeros(3, 20, dtype=torch.bool))
    assert (out_none - out_mask).abs().max() <= TOL


def test_no_gradient_from_padded_tokens_train_single_image():
    gen = torch.Generator().manual_seed(5)
    h, w, H, W = 4, 6, 7, 9
    x = torch.randn(1, H * W, 8, generator=gen)
    mask = torch.ones(1, H, W, dtype=torch.bool)
    mask[0, :h, :w] = False
    mask = mask.flatten(1)
    weight = torch.randn(1, H * W, 8, generator=gen)  # upstream gradient
    peg = randomise(MaskedPEG(embed_dims=8), gen).train()
    alone = copy.deepcopy(peg)

    xp = x.clone().requires_grad_(True)
    (peg(xp, (H, W), mask) * weight).sum().backward()
    xa = crop(x, 0, (H, W), (h, w)).clone().requires_grad_(True)
    (alone(xa, (h, w)) * crop(weight, 0, (H, W), (h, w))).sum().backward()

    for (name, p), (_, q) in zip(peg.named_parameters(), alone.named_parameters()):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    # the gradient at padded tokens is only the identity path: the upstream gradient itself
    assert torch.equal(xp.grad[mask], weight[mask])
    torch.testing.assert_close(crop(xp.grad, 0, (H, W), (h, w)), xa.grad, rtol=1e-4,
                               atol=1e-5)


def test_no_gradient_from_padded_tokens_eval_batch():
    """Eval mode, several images: conv grad of the padded batch = sum of per-image grads."""
    gen = torch.Generator().manual_seed(6)
    sizes = [(3, 5), (6, 2), (6, 6)]
    x, mask, hw = padded_batch(sizes, 8, gen)
    weight = torch.randn(x.shape, generator=gen)
    peg = randomise(MaskedPEG(embed_dims=8), gen).eval()
    (peg(x, hw, mask) * weight).sum().backward()
    batch_grad = peg.proj.weight.grad.clone()
    peg.zero_grad()
    for i, size in enumerate(sizes):
        (peg(crop(x, i, hw, size), size) * crop(weight, i, hw, size)).sum().backward()
    torch.testing.assert_close(batch_grad, peg.proj.weight.grad, rtol=1e-4, atol=1e-5)


def test_every_parameter_gets_a_gradient():
    peg = MaskedPEG(embed_dims=8).train()
    x = torch.randn(2, 12, 8)
    mask = torch.zeros(2, 12, dtype=torch.bool)
    mask[1, 8:] = True
    peg(x, (3, 4), mask).square().sum().backward()
    for name, p in peg.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_mask_as_grid_and_byte_tensor():
    peg = MaskedPEG(embed_dims=4).eval()
    x = torch.randn(2, 12, 4)
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[0, 2:] = True
    ref = peg(x, (3, 4), mask.flatten(1))
    assert torch.equal(peg(x, (3, 4), mask), ref)
    assert torch.equal(peg(x, (3, 4), mask.flatten(1).to(torch.uint8)), ref)


def test_clear_errors():
    peg = MaskedPEG(embed_dims=4)
    x = torch.randn(2, 12, 4)
    with pytest.raises(ValueError, match='hw_shape'):
        peg(x, (3, 5))
    with pytest.raises(ValueError, match='does not match the tokens'):
        peg(x, (3, 4), torch.zeros(2, 13, dtype=torch.bool))
    with pytest.raises(ValueError, match='does not match the tokens'):
        peg(x, (3, 4), torch.zeros(3, 12, dtype=torch.bool))
    with pytest.raises(ValueError, match=r'\(bs, h, w\)'):
        peg(x, (3, 4), torch.zeros(2, 4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match='channels'):
        peg(torch.randn(2, 12, 5), (3, 4))
    with pytest.raises(ValueError, match='batch-first'):
        peg(torch.randn(12, 4), (3, 4))
    with pytest.raises(ValueError, match='odd'):
        MaskedPEG(embed_dims=4, kernel_size=4)
    with pytest.raises(ValueError, match='BatchNorm'):
        MaskedPEG(embed_dims=4, norm_cfg=dict(type='LN'))
    with pytest.raises(ValueError, match=r'has 0 valid cell\(s\).*needs at least 2'):
        peg.train()(torch.randn(1, 12, 4), (3, 4), torch.ones(1, 12, dtype=torch.bool))


def test_registry_and_repr():
    peg = MODELS.build(dict(type='mmposenc.MaskedPEG', embed_dims=8, kernel_size=5))
    assert isinstance(peg, MaskedPEG) and peg.proj.kernel_size == (5, 5)
    assert 'kernel_size=5' in repr(peg)
    ml = MODELS.build(dict(type='MultiLevelMaskedPEG', embed_dims=8, num_levels=3))
    assert isinstance(ml, MultiLevelMaskedPEG) and 'num_levels=3' in repr(ml)


def test_layer_module_does_not_import_mmdet():
    code = ('import sys; import mmposenc.models.layers.generators.masked_peg; '
            "assert 'mmdet' not in sys.modules, 'mmdet imported'")
    subprocess.run([sys.executable, '-c', code], check=True)


# ---------------------------------------------------------------- multi-level


def multilevel_batch(level_sizes, channels, gen):
    """level_sizes[l][i] = (h, w) of image i at level l; returns tokens, mask, shapes."""
    xs, masks, shapes = [], [], []
    for sizes in level_sizes:
        x, mask, hw = padded_batch(sizes, channels, gen)
        xs.append(x)
        masks.append(mask)
        shapes.append(hw)
    return torch.cat(xs, 1), torch.cat(masks, 1), shapes


def test_multilevel_equals_per_level_pegs():
    gen = torch.Generator().manual_seed(7)
    ml = randomise(MultiLevelMaskedPEG(embed_dims=8, num_levels=3), gen).eval()
    level_sizes = [[(8, 6), (5, 6)], [(4, 3), (3, 3)], [(2, 2), (2, 1)]]
    x, mask, shapes = multilevel_batch(level_sizes, 8, gen)
    starts = torch.tensor([0, 48, 60])
    out = ml(x, torch.tensor(shapes), starts, mask)
    sizes = [h * w for h, w in shapes]
    for lvl, (xl, ml_mask, ol) in enumerate(
            zip(x.split(sizes, 1), mask.split(sizes, 1), out.split(sizes, 1))):
        assert torch.equal(ol, ml.pegs[lvl](xl, shapes[lvl], ml_mask))
    assert torch.equal(out[mask], x[mask])


@pytest.mark.parametrize('share_weights', [False, True])
def test_multilevel_padding_invariance(share_weights):
    gen = torch.Generator().manual_seed(8)
    ml = randomise(MultiLevelMaskedPEG(embed_dims=8, num_levels=2, share_weights=share_weights),
                   gen).eval()
    for _ in range(15):
        sizes0 = random_sizes(gen, max_side=10)
        sizes1 = [((h + 1) // 2, (w + 1) // 2) for h, w in sizes0]
        x, mask, shapes = multilevel_batch([sizes0, sizes1], 8, gen)
        out = ml(x, shapes, None, mask)
        n0 = shapes[0][0] * shapes[0][1]
        for i in range(len(sizes0)):
            alone = torch.cat([crop(x[:, :n0], i, shapes[0], sizes0[i]),
                               crop(x[:, n0:], i, shapes[1], sizes1[i])], 1)
            ref = ml(alone, [sizes0[i], sizes1[i]])
            got = torch.cat([crop(out[:, :n0], i, shapes[0], sizes0[i]),
                             crop(out[:, n0:], i, shapes[1], sizes1[i])], 1)
            assert (got - ref).abs().max() <= TOL


def test_multilevel_shared_train_single_image_invariance():
    gen = torch.Generator().manual_seed(9)
    ml = randomise(MultiLevelMaskedPEG(embed_dims=4, num_levels=2, share_weights=True),
                   gen).train()
    alone_ml = copy.deepcopy(ml)
    x, mask, shapes = multilevel_batch([[(5, 4)], [(3, 2)]], 4, gen)
    # pad image 0 further so it has padding on both levels
    x2, mask2, shapes2 = multilevel_batch([[(5, 4), (7, 7)], [(3, 2), (4, 4)]], 4, gen)
    x2 = x2[:1]
    mask2 = mask2[:1]
    out = ml(x2, shapes2, None, mask2)
    n0 = shapes2[0][0] * shapes2[0][1]
    alone = torch.cat([crop(x2[:, :n0], 0, shapes2[0], (5, 4)),
                       crop(x2[:, n0:], 0, shapes2[1], (3, 2))], 1)
    ref = alone_ml(alone, [(5, 4), (3, 2)])
    got = torch.cat([crop(out[:, :n0], 0, shapes2[0], (5, 4)),
                     crop(out[:, n0:], 0, shapes2[1], (3, 2))], 1)
    assert (got - ref).abs().max() <= TOL
    torch.testing.assert_close(ml.pegs[0].norm.running_var, alone_ml.pegs[0].norm.running_var)
    assert len(ml.pegs) == 1


def test_multilevel_errors():
    ml = MultiLevelMaskedPEG(embed_dims=4, num_levels=2)
    x = torch.randn(2, 20 + 6, 4)
    shapes = torch.tensor([[4, 5], [2, 3]])
    with pytest.raises(ValueError, match='levels'):
        ml(x, torch.tensor([[4, 5], [2, 3], [1, 0]]))
    with pytest.raises(ValueError, match='tokens'):
        ml(torch.randn(2, 27, 4), shapes)
    with pytest.raises(ValueError, match='level_start_index'):
        ml(x, shapes, torch.tensor([0, 19]))
    with pytest.raises(ValueError, match='key_padding_mask'):
        ml(x, shapes, None, torch.zeros(2, 25, dtype=torch.bool))
    assert ml(x, shapes, torch.tensor([0, 20])).shape == x.shape


TOO_FEW = (r'MaskedPEG in training: {} has {} valid cell\(s\) in this batch, '
           r'but its BatchNorm needs at least 2 for batch statistics; use larger images .*'
           r'norm_cfg=None')


@pytest.mark.parametrize('masking', ['valid', 'paper'])
def test_too_few_valid_cells_in_training_is_a_clear_error(masking):
    """A batch of one very small image gives a 1x1 level: BatchNorm has no batch statistics.
    Every path (no mask: torch's BatchNorm2d said 'Expected more than 1 value per channel';
    a mask: our masked rows) raises one ValueError naming the level, its valid cells and the
    fix; evaluation and norm_cfg=None work."""
    peg = MaskedPEG(8, masking=masking).train()
    with pytest.raises(ValueError, match=TOO_FEW.format(r'level 0 \(1x1 grid\)', 1)):
        peg(torch.randn(1, 1, 8), (1, 1))
    mask = torch.ones(1, 6, dtype=torch.bool)
    mask[0, 0] = False
    if masking == 'valid':  # 'paper' normalises every position, padded ones included
        with pytest.raises(ValueError, match=TOO_FEW.format(r'level 0 \(2x3 grid\)', 1)):
            peg(torch.randn(1, 6, 8), (2, 3), mask)
    else:
        peg(torch.randn(1, 6, 8), (2, 3), mask)
    peg.eval()(torch.randn(1, 1, 8), (1, 1))
    MaskedPEG(8, norm_cfg=None, masking=masking).train()(torch.randn(1, 1, 8), (1, 1))
    with pytest.raises(ValueError, match=TOO_FEW.format(r'level 0 \(1x1 grid\)', 1)):
        MaskedPEG(8, norm_cfg=dict(type='BN1d'), masking=masking).train()(
            torch.randn(1, 1, 8), (1, 1))


@pytest.mark.parametrize('masking', ['valid', 'paper'])
def test_multilevel_too_few_valid_cells_names_the_level(masking):
    peg = MultiLevelMaskedPEG(8, num_levels=2, masking=masking).train()
    x = torch.randn(1, 5, 8)
    with pytest.raises(ValueError, match=TOO_FEW.format(r'level 1 \(1x1 grid\)', 1)):
        peg(x, [(2, 2), (1, 1)])
    with pytest.raises(ValueError, match=TOO_FEW.format(r'level 1 \(1x1 grid\)', 1)):
        peg(x, [(2, 2), (1, 1)], key_padding_mask=torch.zeros(1, 5, dtype=torch.bool))
    # shared weights pool the valid cells of all levels: 5 here, 1 when all but one padded
    shared = MultiLevelMaskedPEG(8, num_levels=2, share_weights=True, masking=masking).train()
    shared(x, [(2, 2), (1, 1)])
    if masking == 'valid':
        mask = torch.ones(1, 5, dtype=torch.bool)
        mask[0, 0] = False
        shared_name = r'all levels \(shared BatchNorm; grids 2x2, 1x1\)'
        with pytest.raises(ValueError, match=TOO_FEW.format(shared_name, 1)):
            shared(x, [(2, 2), (1, 1)], key_padding_mask=mask)
