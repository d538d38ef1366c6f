"""tools/analysis/visualize_attention.py: recomputed attention = what the module computed."""
import os.path as osp

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tool_files import load_tool

va = load_tool('analysis/visualize_attention.py')

TINY = dict(embed_dims=32, num_layers=2, num_heads=4, feedforward_channels=64)


def _capture_io(module, model, img):
    """Input args and output of ``module`` during ``model(img)``."""
    seen = {}

    def hook(m, args, kwargs, out):
        seen.update(args=args, kwargs=kwargs, out=out)
    h = module.register_forward_hook(hook, with_kwargs=True)
    with torch.no_grad():
        model(img)
    h.remove()
    return seen


def _tiny_models():
    from mmpretrain.models import VisionTransformer

    from mmposenc.models.backbones import CPVT, PEViT
    torch.manual_seed(0)
    deit = VisionTransformer(dict(embed_dims=32, num_layers=2, num_heads=4,
                                  feedforward_channels=64), img_size=64, patch_size=16)
    deit.eval()
    return {
        'cpvt': CPVT(TINY, patch_size=16, peg_positions=(0, 1)).eval(),
        'pevit-rpb': PEViT(TINY, img_size=64, patch_size=16,
                           pos_encoding=dict(type='RelativePositionBias2d')).eval(),
        'pevit-rope': PEViT(TINY, img_size=64, patch_size=16,
                            pos_encoding=dict(type='RoPE2d')).eval(),
        'deit': deit,
    }


@pytest.mark.parametrize('name', ['cpvt', 'pevit-rpb', 'pevit-rope'])
def test_recomputed_attention_reproduces_the_module_output(name):
    """softmax(QK^T/sqrt(d) + PE terms) @ V through the projection gives exactly the output of
    the module (which used F.scaled_dot_product_attention): the recomputation is that
    attention, PE terms included."""
    model = _tiny_models()[name]
    img = torch.randn(2, 3, 64, 80)
    for block in (0, 1):
        mod = va.attention_modules(model)[block]
        io = _capture_io(mod, model, img)
        attn = va.record_attention(model, img, block)
        assert attn.shape == (2, 4, 1 + 4 * 5, 1 + 4 * 5)
        torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4, 21))
        x = io['args'][0]
        b, n, c = x.shape
        v = mod.qkv(x).reshape(b, n, 3, 4, c // 4)[:, :, 2].transpose(1, 2)
        out = mod.proj((attn @ v).transpose(1, 2).reshape(b, n, c))
        torch.testing.assert_close(out, io['out'], atol=1e-5, rtol=1e-5)


class _MPAOnGrid(torch.nn.Module):
    """PerViT's MPA on a fixed 3 x 4 grid of tokens."""

    def __init__(self):
        super().__init__()
        from mmposenc.models.layers import MPA
        self.mpa = MPA(32, 4)

    def forward(self, x):
        return self.mpa(x, (3, 4))


def test_mpa_attention_includes_log_phi_p():
    torch.manual_seed(0)
    model = _MPAOnGrid().eval()
    x = torch.randn(2, 12, 32)
    attn = va.record_attention(model, x, 0)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 4, 12))
    mpa = model.mpa
    v = mpa.qkv(x).reshape(2, 12, 3, 4, 8)[:, :, 2].transpose(1, 2)
    with torch.no_grad():
        out = mpa.proj((attn @ v).transpose(1, 2).reshape(2, 12, 32))
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    # without the Phi_p term the attention differs
    q, k, _ = mpa.qkv(x).reshape(2, 12, 3, 4, 8).permute(2, 0, 3, 1, 4)
    assert not torch.allclose(torch.softmax(q @ k.transpose(-2, -1) * 8**-0.5, -1), attn,
                              atol=1e-3)


def test_matches_a_manual_computation_on_mmpretrain_vit():
    model = _tiny_models()['deit']
    img = torch.randn(1, 3, 64, 64)
    mod = va.attention_modules(model)[-1]
    x = _capture_io(mod, model, img)['args'][0]
    w, bias = mod.qkv.weight, mod.qkv.bias
    q, k = [(x @ w[i * 32:(i + 1) * 32].T + bias[i * 32:(i + 1) * 32]).reshape(1, 17, 4, 8)
            .transpose(1, 2) for i in (0, 1)]
    manual = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
    torch.testing.assert_close(va.record_attention(model, img, -1), manual)
    # per-row normalisation and the query map
    norm = va.row_normalise(manual)
    torch.testing.assert_close(norm.amax(-1), torch.ones(1, 4, 17))
    qmap = va.query_map(manual[0], (4, 4), (1, 2), num_extra_tokens=1)
    assert qmap.shape == (4, 4, 4) and torch.allclose(qmap.amax((-2, -1)), torch.ones(4))
    torch.testing.assert_close(qmap[:, 1, 3] * manual[0, :, 1 + 6, 1:].amax(-1),
                               manual[0, :, 1 + 6, 1 + 7])
    with pytest.raises(ValueError, match='outside the 4x4 patch grid'):
        va.query_map(manual[0], (4, 4), (4, 0), 1)
    with pytest.raises(ValueError, match='out of range: the model has 2 attention blocks'):
        va.record_attention(model, img, 2)


def test_peg_maps_are_the_added_encoding():
    model = _tiny_models()['cpvt']
    img = torch.randn(1, 3, 48, 64)
    maps = va.record_peg_maps(model, img)
    assert len(maps) == 2 and maps[0].shape == (1, 3, 4)
    peg = model.pegs[0]
    io = _capture_io(peg, model, img)
    x = io['args'][0]
    tokens = x[:, 1:].transpose(1, 2).reshape(1, 32, 3, 4)
    expected = peg.proj(tokens) if hasattr(peg, 'proj') else None
    if expected is not None and isinstance(peg.proj, torch.nn.Conv2d):
        torch.testing.assert_close(maps[0][0], expected[0].norm(dim=0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(maps[0][0], (io['out'] - x)[0, 1:].norm(dim=-1).reshape(3, 4))


def test_cli_writes_the_pngs(tmp_path):
    import cv2
    from mmposenc.models.backbones import CPVT
    torch.manual_seed(0)
    model = CPVT(TINY, patch_size=16, peg_positions=(0, ))
    ckpt = tmp_path / 'cpvt.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in model.state_dict().items()}},
               ckpt)
    cfg = tmp_path / 'cpvt.py'
    cfg.write_text("model = dict(type='ImageClassifier', backbone=dict(type='mmposenc.CPVT', "
                   f"arch={TINY!r}, patch_size=16, peg_positions=(0, )))\n")
    imgs = []
    for i in range(2):
        path = str(tmp_path / f'img{i}.png')
        cv2.imwrite(path, (np.random.RandomState(i).rand(40, 50, 3) * 255).astype(np.uint8))
        imgs.append(path)
    out = tmp_path / 'maps'
    files = va.main([str(cfg), '--checkpoint', str(ckpt), '--img', *imgs, '--size', '64', '96',
                     '--block', '1', '--head', '0', '2', '--query', '1', '2', '--out-dir',
                     str(out)])
    assert len(files['attention']) == 4 and len(files['peg']) == 2 and not files['phi_p']
    for path in files['attention'] + files['peg']:
        assert osp.getsize(path) > 1000
    assert osp.basename(files['attention'][1]) == 'img0_block1_query1-2.png'


@pytest.mark.parametrize('kwargs', [dict(), dict(with_phi_p=False), dict(with_phi_c=False)])
def test_mpa_ablations_recomputed_attention(kwargs):
    """PerViT MPA with and without Phi_p / Phi_c: Normalize[Phi_c * Phi_p] of Sec. 4.1."""
    from mmposenc.models.layers import MPA
    torch.manual_seed(0)
    mpa = MPA(32, 4, **kwargs).eval()
    x = torch.randn(2, 20, 32)
    maps = mpa.attention_maps(x, (4, 5))
    expected = maps['phi_a'] / maps['phi_a'].sum(-1, keepdim=True)
    torch.testing.assert_close(va.attention_weights(mpa, x, ((4, 5), )), expected,
                               rtol=1e-5, atol=1e-6)
