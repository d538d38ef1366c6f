"""PerViT analysis: impact Psi (Eq. 12), nonlocality Omega (Eq. 13), peripheral regions (Eq.
11, 36-38; the mean inside each region by default, Eq. 11 as printed with normalize='eq11') on
hand-computable cases and against literal loops, measures over images, figures, and
tools/analysis/pervit_analysis.py on two images."""
import glob
import importlib.util
import json
import math
import os.path as osp

import pytest
import torch

from mmposenc.analysis import (REGIONS, attention_measures, classify_heads, collect_phi_p,
                               impact, nonlocality, plot_impact, plot_nonlocality, plot_phi_p,
                               plot_regions, region_counts, region_masks, region_radii,
                               region_scores, token_distances)
from mmposenc.models.backbones import PerViT
from mmposenc.models.layers import pairwise_distances

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TINY = dict(embed_dims=[16, 16, 24, 24], depths=[1, 1, 1, 1], num_heads=2,
            stem_channels=[8, 8, 8, 16])
PNG = b'\x89PNG\r\n\x1a\n'


def _is_png(path):
    with open(path, 'rb') as f:
        return f.read(8) == PNG


def test_radii_of_appendix_b():
    """Eq. 38 on 14 x 14 tokens: 1.19 / 3.37 / 5.83 / 7.9 (Appendix B)."""
    assert [round(r, 2) for r in region_radii((14, 14))] == [1.19, 3.37, 5.83, 7.9]
    assert region_radii((5, 5))[-1] == pytest.approx(5 / math.sqrt(math.pi))  # 220 degrees
    with pytest.raises(ValueError, match='increasing'):
        region_radii((14, 14), angles=(40, 5))


def test_region_scores_hand_computed_on_5x5():
    """Uniform Phi on 5 x 5 tokens, radii 0.43 / 1.20 / 2.08 / 2.82: ordered pairs at distance
    0 | 1 | sqrt2, 2 | sqrt5 are 25 | 80 | 64 + 60 | 96 (sqrt8 = 2.83 lies beyond 2.82)."""
    ones = torch.ones(25, 25, dtype=torch.float64)
    # default: the mean score inside each region; a uniform Phi ties, the first region wins
    torch.testing.assert_close(region_scores(ones, (5, 5)), torch.ones(4, dtype=torch.float64))
    assert classify_heads(ones[None], (5, 5)) == ['central']
    # Eq. 11 as printed: the pairs of each region over |P|^2 = 625
    expected = torch.tensor([25., 80., 124., 96.], dtype=torch.float64) / 625
    torch.testing.assert_close(region_scores(ones, (5, 5), normalize='eq11'), expected)
    assert classify_heads(ones[None], (5, 5), normalize='eq11') == ['mid-peripheral']
    for bad in ('max', 'pairs', 'region'):  # 'pairs' / 'region': the former names
        with pytest.raises(ValueError, match="'mean' or 'eq11'"):
            region_scores(ones, (5, 5), normalize=bad)


def test_mean_and_eq11_differ_where_they_must():
    """Eq. 11's |P|^2 is the same for every region, so the printed form ranks the regions by
    their total mass: it sends a uniform Phi_p (and one that is highest at the query) to the
    region with the most pairs, where the mean inside each region ties (uniform) or picks the
    region of the highest scores (central)."""
    for hw in [(5, 5), (14, 14), (6, 9)]:
        n = hw[0] * hw[1]
        pairs = region_masks(hw).sum(dim=(-2, -1))
        most_pairs = REGIONS[int(pairs.argmax())]
        assert most_pairs != 'central'
        uniform = torch.full((1, n, n), 0.25, dtype=torch.float64)  # exact sums
        mean = region_scores(uniform, hw)
        assert mean.eq(0.25).all()  # exactly equal in every region
        assert classify_heads(uniform, hw) == ['central']  # the tie goes to the inner region
        assert classify_heads(uniform, hw, normalize='eq11') == [most_pairs]
        torch.testing.assert_close(region_scores(uniform, hw, normalize='eq11'),
                                   0.25 * pairs[None].double() / n**2)
        peaked = uniform.clone()
        peaked[0].fill_diagonal_(1.0)  # the query scores 1, every other key 0.25
        assert classify_heads(peaked, hw) == ['central']
        assert classify_heads(peaked, hw, normalize='eq11') == [most_pairs]
    # 14 x 14 (the README's counts): the printed form picks mid-peripheral, the most pairs
    assert region_masks((14, 14)).sum(dim=(-2, -1)).tolist() == [924, 4932, 8476, 7420]


@pytest.mark.parametrize('normalize', ['mean', 'eq11'])
def test_known_rings_are_classified_by_their_region(normalize):
    hw = (14, 14)
    d = token_distances(hw)
    r = region_radii(hw)
    rings = [d < r[0], (d >= r[0]) & (d < r[1]), (d >= r[1]) & (d < r[2]),
             (d >= r[2]) & (d < r[3])]
    phi = torch.stack(rings).double() * 0.9 + 0.01  # a ring on a small floor
    assert classify_heads(phi, hw, normalize=normalize) == list(REGIONS)
    assert classify_heads(torch.eye(196)[None], hw, normalize=normalize) == ['central']


@pytest.mark.parametrize('hw', [(3, 4), (5, 6)])
def test_region_scores_and_nonlocality_equal_literal_sums(hw):
    """Eq. 11 and 13 written as loops over (q, k) on a random Phi: the default is the mean of
    Phi over the pairs of each region (0 for a region without pairs: on 3 x 4 tokens no
    distance falls in [0.29, 0.83) or [1.44, 1.95)), 'eq11' the sum over |P|^2."""
    torch.manual_seed(0)
    h, w = hw
    n = h * w
    phi = torch.rand(2, n, n, dtype=torch.float64)
    bounds = [0.0] + region_radii(hw)
    coords = [(y, x) for y in range(h) for x in range(w)]
    sums = torch.zeros(2, 4, dtype=torch.float64)
    pairs = [0] * 4
    omega = torch.zeros(2, dtype=torch.float64)
    for qi, (qy, qx) in enumerate(coords):
        for ki, (ky, kx) in enumerate(coords):
            tokens = math.hypot(qy - ky, qx - kx)
            normed = math.hypot((qy - ky) * 2 / (h - 1), (qx - kx) * 2 / (w - 1))  # [-1, 1]
            omega += phi[:, qi, ki] * normed / n**2
            for p in range(4):
                if bounds[p] <= tokens < bounds[p + 1]:
                    sums[:, p] += phi[:, qi, ki]
                    pairs[p] += 1
    assert sum(pairs) < n**2  # the far corners lie beyond r_f
    assert pairs.count(0) == (2 if hw == (3, 4) else 0)
    means = torch.stack([sums[:, p] / pairs[p] if pairs[p] else sums[:, p] * 0
                         for p in range(4)], dim=-1)
    torch.testing.assert_close(region_scores(phi, hw), means)
    torch.testing.assert_close(region_scores(phi, hw, normalize='eq11'), sums / n**2)
    assert classify_heads(phi, hw) == [REGIONS[int(i)] for i in means.argmax(-1)]
    assert classify_heads(phi, hw, normalize='eq11') == [REGIONS[int(i)] for i in
                                                         sums.argmax(-1)]
    torch.testing.assert_close(nonlocality(phi, hw), omega)


def test_nonlocality_hand_computed():
    """Uniform: the mean distance; delta at the query: 0; on a 1 x 3 row (x = -1, 0, 1) a
    delta one step to the right: (1 + 1) / 9."""
    hw = (6, 10)
    n = 60
    ones = torch.ones(1, n, n, dtype=torch.float64)
    torch.testing.assert_close(nonlocality(ones, hw)[0],
                               pairwise_distances(hw, dtype=torch.float64).mean())
    assert nonlocality(torch.eye(n, dtype=torch.float64)[None], hw)[0] == 0
    right = torch.zeros(3, 3, dtype=torch.float64)
    right[0, 1] = right[1, 2] = 1
    assert nonlocality(right, (1, 3)).item() == pytest.approx(2 / 9)
    wide = torch.exp(-pairwise_distances(hw) ** 2)
    narrow = torch.exp(-pairwise_distances(hw) ** 2 / 0.01)
    assert nonlocality(wide, hw) > nonlocality(narrow, hw)
    with pytest.raises(ValueError, match='must end with'):
        nonlocality(ones, (3, 3))


def test_impact_hand_computed():
    """Psi_p = 1 / ||Phi_a - Phi_p||_F, Psi_c = 1 / ||Phi_a - Phi_c||_F on a 2 x 2 case."""
    phi_p = torch.tensor([[1., .5], [.5, 1.]], dtype=torch.float64)
    phi_c = torch.tensor([[1., .5], [.25, 1.]], dtype=torch.float64)
    phi_a = phi_c * phi_p  # [[1, .25], [.125, 1]]
    assert impact(phi_a, phi_p).item() == pytest.approx(1 / math.sqrt(.25**2 + .375**2))
    assert impact(phi_a, phi_c).item() == pytest.approx(1 / math.sqrt(.25**2 + .125**2))
    assert impact(phi_p, phi_p).item() == math.inf
    batch = torch.stack([phi_a, phi_a * 0])[:, None]  # (2, 1, 2, 2)
    assert impact(batch, phi_p).shape == (2, 1)


def _tiny_pervit(**kwargs):
    torch.manual_seed(0)
    model = PerViT(arch=TINY, **kwargs)
    model.init_weights()
    return model.eval()


def test_attention_measures_over_images(tmp_path):
    model = _tiny_pervit()
    batches = [torch.randn(2, 3, 64, 80), torch.randn(1, 3, 64, 80)]
    result = attention_measures(model, batches)
    assert result['num_images'] == 3 and result['hw_shape'] == [4, 5]
    assert len(result['layers']) == 4
    # layer 2 by hand: Psi and Omega of every image, then the mean over the three images
    captured = []
    handle = model.blocks[2].attn.register_forward_pre_hook(
        lambda m, args: captured.append(m.attention_maps(*args)))
    with torch.no_grad():
        for images in batches:
            model(images)
    handle.remove()
    maps = {k: torch.cat([c[k] if c[k].dim() == 4 else c[k].expand_as(c['phi_a'])
                          for c in captured]).double() for k in captured[0]}
    layer = result['layers'][2]
    torch.testing.assert_close(torch.tensor(layer['psi_p'], dtype=torch.float64),
                               impact(maps['phi_a'], maps['phi_p']).mean(0))
    torch.testing.assert_close(torch.tensor(layer['psi_c'], dtype=torch.float64),
                               impact(maps['phi_a'], maps['phi_c']).mean(0))
    torch.testing.assert_close(torch.tensor(layer['omega_a'], dtype=torch.float64),
                               nonlocality(maps['phi_a'], (4, 5)).mean(0))
    torch.testing.assert_close(torch.tensor(layer['omega_c'], dtype=torch.float64),
                               nonlocality(maps['phi_c'], (4, 5)).mean(0))
    torch.testing.assert_close(torch.tensor(layer['omega_p'], dtype=torch.float64),
                               nonlocality(maps['phi_p'][0], (4, 5)))
    assert result['normalize'] == 'mean'
    assert layer['regions'] == classify_heads(maps['phi_p'][0], (4, 5))
    eq11 = attention_measures(model, batches[:1], normalize='eq11')
    assert eq11['normalize'] == 'eq11'
    assert eq11['layers'][2]['regions'] == classify_heads(maps['phi_p'][0], (4, 5),
                                                          normalize='eq11')
    # Fig. 5: heads + CPE + the FFN's two linear layers, the latter three central
    counts = region_counts(result)
    assert all(sum(c) == 2 + 3 for c in counts) and all(c[0] >= 3 for c in counts)
    # the peripheral initialisation: local first layer, global last
    assert sum(result['layers'][0]['omega_p']) < sum(result['layers'][-1]['omega_p'])
    for fn, name in [(plot_regions, 'fig5.png'), (plot_impact, 'fig7.png'),
                     (plot_nonlocality, 'fig8.png')]:
        assert _is_png(fn(result, str(tmp_path / 'sub' / name)))


def test_attention_measures_of_ablations():
    """Without Phi_p / Phi_c the measures that need them are None; no CPE: 2 central."""
    x = [torch.randn(1, 3, 48, 48)]
    no_p = attention_measures(_tiny_pervit(with_phi_p=False), x)['layers'][0]
    assert no_p['psi_p'] is None and no_p['omega_p'] is None and no_p['regions'] is None
    assert no_p['omega_c'] is not None
    no_c = attention_measures(_tiny_pervit(with_phi_c=False, with_cpe=False), x)
    assert no_c['layers'][0]['omega_c'] is None and no_c['layers'][0]['regions']
    assert all(sum(c) == 2 + 2 for c in region_counts(no_c))
    with pytest.raises(ValueError, match='no MPA'):
        attention_measures(torch.nn.Linear(2, 2), x)


def test_collect_and_plot_phi_p(tmp_path):
    model = _tiny_pervit()
    phis = collect_phi_p(model, (9, 12))
    assert len(phis) == 4 and phis[0].shape == (2, 108, 108)
    assert _is_png(plot_phi_p(phis, (9, 12), str(tmp_path / 'sub' / 'phi_p.png')))
    with pytest.raises(ValueError, match='outside'):
        plot_phi_p(phis, (9, 12), str(tmp_path / 'x.png'), query=(9, 0))


def _load_tool():
    path = osp.join(REPO, 'tools', 'analysis', 'pervit_analysis.py')
    spec = importlib.util.spec_from_file_location('pervit_analysis_tool', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tool_on_two_images(tmp_path, coco128_root):
    """tools/analysis/pervit_analysis.py: a tiny random PerViT from a config, two COCO128
    images through the config's test pipeline and data preprocessor."""
    pytest.importorskip('mmpretrain')
    images = sorted(glob.glob(osp.join(coco128_root, 'train2017', '*.jpg')))[:2]
    assert len(images) == 2
    cfg = tmp_path / 'tiny.py'
    cfg.write_text(f"_base_ = ['{REPO}/configs/pervit/pervit-tiny_8xb128_in1k.py']\n"
                   f"model = dict(backbone=dict(arch=dict(_delete_=True, **{TINY!r})), "
                   'head=dict(in_channels=24))\n')
    tool = _load_tool()
    out = tmp_path / 'out'
    result = tool.main([str(cfg), '--images', *images, '--out-dir', str(out),
                        '--batch-size', '1'])
    assert result['num_images'] == 2 and result['hw_shape'] == [14, 14]  # 224 x 224 crops
    with open(out / 'measures.json') as f:
        saved = json.load(f)
    assert saved['layers'][0]['psi_p'] == result['layers'][0]['psi_p']
    assert [round(r, 2) for r in saved['radii']] == [1.19, 3.37, 5.83, 7.9]
    for name in ('fig4_phi_p.png', 'fig5_regions.png', 'fig7_impact.png',
                 'fig8_nonlocality.png'):
        assert _is_png(out / name), name
    # without images: Phi_p only (Omega_p, regions, Fig. 4 and 5)
    torch.manual_seed(0)  # the same initial weights in the three builds below
    phi_only = tool.main([str(cfg), '--hw', '6', '7', '--out-dir', str(tmp_path / 'p')])
    assert 'psi_p' not in phi_only['layers'][0] and phi_only['layers'][0]['regions']
    assert _is_png(tmp_path / 'p' / 'fig5_regions.png')
    # --normalize: 'mean' by default, 'eq11' one flag away, both the library's classification
    torch.manual_seed(0)
    phis = collect_phi_p(tool.build(tool.parse_args([str(cfg)]))[0].backbone, (6, 7))
    assert phi_only['normalize'] == 'mean'
    assert [layer['regions'] for layer in phi_only['layers']] == [
        classify_heads(phi, (6, 7)) for phi in phis]
    torch.manual_seed(0)
    eq11 = tool.main([str(cfg), '--hw', '6', '7', '--normalize', 'eq11', '--out-dir',
                      str(tmp_path / 'e')])
    assert eq11['normalize'] == 'eq11'
    assert [layer['regions'] for layer in eq11['layers']] == [
        classify_heads(phi, (6, 7), normalize='eq11') for phi in phis]
