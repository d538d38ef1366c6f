"""PerViT analysis: nonlocality (Omega), impact of position (Psi), peripheral regions, plots."""
import pytest
import torch

from mmposenc.analysis import (classify_heads, collect_phi_p, nonlocality, peripheral_radii,
                               peripheral_regions, plot_phi_p, position_impact)
from mmposenc.analysis.pervit import REGIONS, gate_extent
from mmposenc.models.backbones import PerViT
from mmposenc.models.layers import pairwise_distances


def _gaussians(hw_shape, sigmas):
    d = pairwise_distances(hw_shape, dtype=torch.float64)
    return torch.stack([torch.exp(-d**2 / (2 * s**2)) for s in sigmas])


@pytest.mark.parametrize('hw_shape', [(14, 14), (6, 10)])
def test_nonlocality_orders_gaussians_by_width(hw_shape):
    phi = _gaussians(hw_shape, [0.05, 0.2, 0.5, 2.0])
    omega = nonlocality(phi, hw_shape)
    assert omega.shape == (4, )
    assert torch.all(omega[1:] > omega[:-1])
    ones = torch.ones(1, *phi.shape[1:], dtype=torch.float64)
    mean_dist = pairwise_distances(hw_shape, dtype=torch.float64).mean()
    torch.testing.assert_close(nonlocality(ones, hw_shape)[0], mean_dist)
    assert nonlocality(torch.eye(phi.shape[-1])[None], hw_shape)[0] == 0
    with pytest.raises(ValueError, match='must end with'):
        nonlocality(phi, (3, 3))


def test_position_impact():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 20, 20)
    const = torch.full((3, 20, 20), -1.7)
    torch.testing.assert_close(position_impact(logits, const), torch.zeros(2, 3))
    local = torch.log(_gaussians((4, 5), [0.1, 0.5, 3.0]).float())
    psi = position_impact(logits, local)
    assert torch.all((psi > 0) & (psi < 1))
    assert torch.all(psi[:, 0] > psi[:, 2])  # a sharper gate changes the attention more


@pytest.mark.parametrize('hw_shape', [(14, 14), (50, 84), (7, 3)])
def test_radii_and_regions_any_grid(hw_shape):
    radii = peripheral_radii(hw_shape)
    assert radii == sorted(radii) and radii[0] < radii[-1]
    regions = peripheral_regions(hw_shape, radii)
    n = hw_shape[0] * hw_shape[1]
    centre = (hw_shape[0] // 2) * hw_shape[1] + hw_shape[1] // 2
    counts = torch.bincount(regions[centre], minlength=4)
    assert counts[0] >= 0.01 * n  # the central disk holds >= 1% of the field
    assert counts[:2].sum() >= 0.1 * n and counts[:3].sum() >= 0.4 * n
    assert torch.all(torch.diagonal(regions) == 0)
    with pytest.raises(ValueError, match='increasing'):
        peripheral_radii(hw_shape, (0.5, 0.1))


def test_classify_heads_on_known_gates():
    hw = (14, 14)
    radii = peripheral_radii(hw)
    d = pairwise_distances(hw, dtype=torch.float64)
    eye = torch.eye(196, dtype=torch.float64)
    disk_mid = (d <= 0.5 * (radii[1] + radii[2])).double()
    phi = torch.stack([eye, disk_mid, torch.ones(196, 196, dtype=torch.float64)])
    assert classify_heads(phi, hw) == ['central', 'mid-peripheral', 'far-peripheral']
    extent = gate_extent(phi, hw)
    assert extent[0] == 0 and extent[1] <= 0.5 * (radii[1] + radii[2]) + 1e-9
    assert set(classify_heads(_gaussians(hw, [0.01, 0.1, 0.3, 3.0]), hw)) <= set(REGIONS)


def test_collect_and_plot_all_layers_and_heads(tmp_path):
    model = PerViT(arch=dict(embed_dims=[16, 16, 16, 16], depths=[1, 1, 1, 1], num_heads=2,
                             stem_channels=[16]))
    phis = collect_phi_p(model, (9, 12))
    assert len(phis) == 4 and phis[0].shape == (2, 108, 108)
    omega = [nonlocality(p, (9, 12)).mean() for p in phis]
    assert omega[0] < omega[-1]  # peripheral init: local first, global last
    out = plot_phi_p(phis, (9, 12), str(tmp_path / 'sub' / 'phi_p.png'))
    with open(out, 'rb') as f:
        assert f.read(8) == b'\x89PNG\r\n\x1a\n'
    with pytest.raises(ValueError, match='outside'):
        plot_phi_p(phis, (9, 12), str(tmp_path / 'x.png'), query=(9, 0))
