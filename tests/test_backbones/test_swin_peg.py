"""Properties of the Swin + PEG + GAP backbone."""
import copy

import pytest
import torch

from mmposenc.models.backbones import SwinPEG

SMALL = dict(embed_dims=16, depths=[2, 1, 2, 1], num_heads=[1, 2, 2, 4])


def _small(**kwargs):
    torch.manual_seed(0)
    model = SwinPEG(SMALL, window_size=4, drop_path_rate=0., **kwargs)
    model.init_weights()
    return model.eval()


def test_arch_and_names_match_mmpretrain_swin():
    from mmpretrain.models import SwinTransformer
    ours = SwinPEG('tiny')
    ref = SwinTransformer('tiny')
    ours_keys = {k for k in ours.state_dict() if not k.startswith('pegs.')}
    assert ours_keys == set(ref.state_dict())
    extra = sum(p.numel() for n, p in ours.named_parameters() if n.startswith('pegs.'))
    assert extra == sum(c * 9 + c for c in (96, 192, 384, 768))
    with pytest.raises(ValueError, match='is not in default archs'):
        SwinPEG('huge')


def test_mmpretrain_swin_checkpoint_loads_except_pegs():
    from mmpretrain.models import SwinTransformer
    ref = SwinTransformer(dict(SMALL), window_size=4)
    ours = _small()
    missing, unexpected = ours.load_state_dict(ref.state_dict(), strict=False)
    assert not unexpected and all(k.startswith('pegs.') for k in missing)


@pytest.mark.parametrize('size', [(64, 64), (50, 70), (8, 8), (4, 4), (96, 36)])
def test_any_input_size(size):
    model = _small(out_indices=(0, 1, 2, 3))
    outs = model(torch.rand(2, 3, *size))
    h, w = -(-size[0] // 4), -(-size[1] // 4)
    for i, out in enumerate(outs):
        assert out.shape == (2, 16 * 2**i, h, w)
        assert torch.isfinite(out).all()
        h, w = -(-h // 2), -(-w // 2)


def test_peg_after_first_block_of_each_stage():
    model = _small()
    order = []
    for i, stage in enumerate(model.stages):
        for j, blk in enumerate(stage.blocks):
            blk.register_forward_hook(lambda *a, n=f'b{i}.{j}': order.append(n))
        model.pegs[i].register_forward_hook(lambda *a, n=f'peg{i}': order.append(n))
    model(torch.rand(1, 3, 32, 32))
    assert order == ['b0.0', 'peg0', 'b0.1', 'b1.0', 'peg1', 'b2.0', 'peg2', 'b2.1',
                     'b3.0', 'peg3']


def test_gradients_and_round_trip():
    model = _small(out_indices=(0, 1, 2, 3)).train()
    sum(o.pow(2).mean() for o in model(torch.rand(2, 3, 40, 56))).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    model.eval()
    other = SwinPEG(SMALL, window_size=4, out_indices=(0, 1, 2, 3)).eval()
    other.load_state_dict(copy.deepcopy(model.state_dict()), strict=True)
    x = torch.rand(1, 3, 36, 44)
    torch.testing.assert_close(model(x)[-1], other(x)[-1])
    assert not any('absolute_pos_embed' in n for n, _ in model.named_parameters())
