"""The one position grid (``mmposenc.models.layers.grid.position_grid``) against the cell
coordinates written out cell by cell, and the encodings that take their coordinates from it."""
import pytest
import torch

from mmposenc.models.layers import (DINOv3RoPE, RoPE2d, RoPEMixed, normalized_grid,
                                    pairwise_distances)
from mmposenc.models.layers.encodings.rel_pos_bias import clipped_relative_index
from mmposenc.models.layers.grid import position_grid

GRIDS = [(1, 1), (3, 4), (5, 2), (7, 7)]


def cells(H, W):
    """Row-major (row, column) of every cell."""
    return [(r, c) for r in range(H) for c in range(W)]


@pytest.mark.parametrize('hw', GRIDS)
@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.long])
def test_indices(hw, dtype):
    grid = position_grid(hw, dtype=dtype)
    assert grid.dtype == dtype and grid.shape == (hw[0] * hw[1], 2)
    assert grid.tolist() == [[c, r] for r, c in cells(*hw)]  # (x, y)


@pytest.mark.parametrize('hw', GRIDS)
def test_corners(hw):
    H, W = hw
    grid = position_grid(hw, 'corners', dtype=torch.float64)
    step_y, step_x = 2 / max(H - 1, 1), 2 / max(W - 1, 1)
    expected = torch.tensor([[-1 + c * step_x, -1 + r * step_y] for r, c in cells(H, W)],
                            dtype=torch.float64)
    assert torch.allclose(grid, expected, atol=1e-12)
    # PerViT's normalized_grid is the same grid in (y, x) order, with its distances
    assert torch.equal(normalized_grid(hw, dtype=torch.float64), grid.flip(-1))
    assert torch.allclose(pairwise_distances(hw, dtype=torch.float64), torch.cdist(grid, grid))


@pytest.mark.parametrize('hw', GRIDS)
def test_centres(hw):
    H, W = hw
    grid = position_grid(hw, 'centres')
    expected = torch.tensor([[2 * (c + .5) / W - 1, 2 * (r + .5) / H - 1] for r, c in cells(H, W)])
    assert torch.allclose(grid, expected, atol=1e-6)
    assert grid.abs().max() < 1


def test_centres_over_each_images_extent():
    """With an extent per image (rows, columns), image b's valid cells get exactly the
    coordinates of its own grid; the padded cells continue beyond 1."""
    extent = torch.tensor([[4., 6.], [2., 3.], [4., 2.]])
    grid = position_grid((4, 6), 'centres', extent)
    assert grid.shape == (3, 24, 2)
    for b, (h, w) in enumerate(extent.long().tolist()):
        own = grid[b].view(4, 6, 2)[:h, :w]
        assert torch.equal(own.reshape(-1, 2), position_grid((h, w), 'centres'))
        assert grid[b].max() > 1 or (h, w) == (4, 6)


def test_errors():
    with pytest.raises(ValueError, match='normalize must be one of'):
        position_grid((2, 2), 'diag')
    with pytest.raises(ValueError, match="normalize='centres' only"):
        position_grid((2, 2), extent=torch.ones(1, 2))


def test_encodings_take_their_coordinates_from_it():
    hw = (3, 5)
    assert torch.equal(RoPE2d(16).grid_coords(hw), position_grid(hw)[None])
    assert torch.equal(RoPEMixed(16).grid_coords(hw), position_grid(hw)[None])
    assert torch.equal(DINOv3RoPE(16).eval().grid_coords(hw), position_grid(hw, 'centres')[None])
    index = clipped_relative_index(hw, 10)
    xy = position_grid(hw, dtype=torch.long)
    assert torch.equal(index, (xy[None, :, 1] - xy[:, None, 1] + 10) * 21
                       + xy[None, :, 0] - xy[:, None, 0] + 10)
