"""CPVT ablations that change how the PEG is wired: no zero padding (a shorter sequence) and the
PEG on the queries and keys only."""
import pytest
import torch

from mmposenc.models.backbones import CPVT

SMALL = dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64)


def _small(**kwargs):
    torch.manual_seed(0)
    model = CPVT(SMALL, **kwargs)
    model.init_weights()
    for peg in model.pegs:  # non-zero biases so that they are exercised
        for p in peg.parameters():
            if p.dim() == 1:
                p.data.normal_()
    return model.eval()


def _tokens_into_layers(model, x):
    """Number of tokens each encoder layer receives."""
    seen = []
    hooks = [layer.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape[1]))
             for layer in model.layers]
    with torch.no_grad():
        out = model(x)
    for h in hooks:
        h.remove()
    return seen, out


def test_no_padding_shortens_the_sequence_from_196_to_144():
    """[E] §5.6 / Table 10: without the zero padding the sequence goes from 196 to 144 tokens
    and the later layers work on the shorter one."""
    model = _small(peg_cfg=dict(padding='none'))
    seen, (cls, ) = _tokens_into_layers(model, torch.rand(2, 3, 224, 224))
    assert seen == [1 + 196, 1 + 144, 1 + 144, 1 + 144]
    assert cls.shape == (2, 32)
    # the default (zero padding) keeps 196
    seen, _ = _tokens_into_layers(_small(), torch.rand(2, 3, 224, 224))
    assert seen == [197] * 4


def test_no_padding_every_peg_shrinks_and_maps_report_the_grid():
    model = _small(peg_cfg=dict(padding='none'), peg_positions=(0, 1, 2), out_type='featmap',
                   out_indices=(0, 3))
    seen, (after0, last) = _tokens_into_layers(model, torch.rand(1, 3, 224, 160))
    assert seen == [14 * 10, 12 * 8, 10 * 6, 8 * 4]
    assert after0.shape == (1, 32, 12, 8) and last.shape == (1, 32, 8, 4)
    with pytest.raises(ValueError, match=r"padding='none' shrinks the grid"):
        model(torch.rand(1, 3, 96, 96))  # 6 -> 4 -> 2 -> too small


def test_qk_mode_matches_a_hand_written_layer():
    """peg_on='qk': the layer after the PEG takes queries and keys from LN(X + F(X)) and values
    from LN(X); its residual is X. Written out by hand with the layer's own weights."""
    import torch.nn.functional as F
    model = _small(peg_on='qk', out_type='cls_token', out_indices=(1, ))
    x = torch.rand(2, 3, 64, 48)
    with torch.no_grad():
        tokens, hw = model.patch_embed(x)
        tokens = torch.cat((model.cls_token.expand(2, -1, -1), tokens), 1)
        x0 = model.layers[0](tokens)
        qk_in = model.pegs[0](x0, hw)
        layer = model.layers[1]
        C, heads = 32, 2
        w, b = layer.attn.qkv.weight, layer.attn.qkv.bias
        q, k, _ = F.linear(layer.ln1(qk_in), w, b).chunk(3, dim=-1)
        _, _, v = F.linear(layer.ln1(x0), w, b).chunk(3, dim=-1)

        def split(t):
            return t.reshape(2, -1, heads, C // heads).transpose(1, 2)

        attn = F.scaled_dot_product_attention(split(q), split(k), split(v))
        y = x0 + layer.attn.proj(attn.transpose(1, 2).reshape(2, -1, C))
        y = layer.ffn(layer.ln2(y), identity=y)
        (out, ) = model(x)
    torch.testing.assert_close(out, y[:, 0])


def test_qk_mode_tokens_never_carry_the_encoding():
    """With peg_on='qk' the PEG reaches the tokens only through the attention weights: if the
    next layer's attention is switched off, the output equals that of the model without PEG."""
    qk = _small(peg_on='qk')
    none = CPVT(SMALL, peg_positions=())
    none.load_state_dict(qk.state_dict(), strict=False)
    none.eval()
    for model in (qk, none):
        torch.nn.init.zeros_(model.layers[1].attn.proj.weight)
    x = torch.rand(2, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(qk(x)[0], none(x)[0])
        qkv = _small()  # the paper's PEG: the tokens themselves change
        qkv.load_state_dict(qk.state_dict())
        torch.nn.init.zeros_(qkv.layers[1].attn.proj.weight)
        assert not torch.allclose(qkv(x)[0], none(x)[0])


def test_qk_mode_gradients_reach_the_peg():
    model = _small(peg_on='qk').train()
    model(torch.rand(2, 3, 48, 64))[0].pow(2).sum().backward()
    for name, p in model.pegs.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize('kwargs,match', [
    (dict(peg_on='v'), r"peg_on must be 'qkv' or 'qk'"),
    (dict(peg_on='qk', peg_cfg=dict(padding='none')), r"peg_on='qk' needs PEGs that keep"),
    (dict(peg_on='qk', peg_positions=(3, )), r'the last layer \(3\) has none'),
])
def test_bad_wiring_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CPVT(SMALL, **kwargs)


def test_frozen_learned_peg_loads_only_the_peg(tmp_path):
    """[L] §5.1 / [E] Table 11 "3 fixed (learned init)": the PEG of a trained model, frozen, in
    a model otherwise trained from scratch."""
    trained = _small()
    ckpt = tmp_path / 'trained.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in trained.state_dict().items()}},
               ckpt)
    torch.manual_seed(1)
    model = CPVT(SMALL, peg_cfg=dict(frozen=True, init_cfg=dict(
        type='Pretrained', checkpoint=str(ckpt), prefix='backbone.pegs.0.')))
    model.init_weights()
    for name, p in model.pegs.named_parameters():
        torch.testing.assert_close(p, dict(trained.pegs.named_parameters())[name])
        assert not p.requires_grad
    assert not torch.allclose(model.layers[0].attn.qkv.weight, trained.layers[0].attn.qkv.weight)
    assert all(p.requires_grad for n, p in model.named_parameters() if not n.startswith('pegs'))
