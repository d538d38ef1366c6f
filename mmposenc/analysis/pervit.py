"""Measures and plots of PerViT's position-based attention Phi_p (paper Sec. 5, App. B).

* :func:`nonlocality` (Omega, Eq. 13): ``mean_{q,k} Phi_p[q, k] * ||p_q - p_k||`` per head, with
  coordinates normalised to ``[-1, 1]`` -- exactly what the official ``util/visualize.py``
  computes to sort the heads.
* :func:`position_impact` (Psi, Eq. 12): how much Phi_p changes the attention: the mean over
  queries of the total-variation distance between ``Normalize[Phi_c * Phi_p]`` and
  ``Normalize[Phi_c]``, in ``[0, 1)``.
* :func:`peripheral_radii`, :func:`peripheral_regions`, :func:`classify_heads` (Eq. 11): the
  visual field around a query is split by distance into central / para-central /
  mid-peripheral / far-peripheral regions; a head is assigned the region its attended extent
  (:func:`gate_extent`, the radius where its gate falls to half height) reaches.

Our reading of Eq. 11/12/38 and of the Appendix B intervals: the radii are defined by the
share of the visual field each disk covers (``area_fractions``; the central region covers 1%
of it, as in human vision), measured on the actual ``H x W`` token grid, so they exist for any
grid. All constants are arguments.
"""
import math
import os.path as osp
from typing import List, Optional, Sequence

import torch

from mmposenc.models.layers.peripheral import PeripheralPositionEncoding, pairwise_distances

REGIONS = ('central', 'para-central', 'mid-peripheral', 'far-peripheral')
#: share of the visual field inside the central, para-central and mid-peripheral disks
DEFAULT_AREA_FRACTIONS = (0.01, 0.1, 0.4)


def nonlocality(phi_p: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
    """Omega (Eq. 13): distance-weighted mean of Phi_p.

    Args:
        phi_p (Tensor): ``(..., N, N)`` gate(s), queries x keys, ``N = H * W``.
        hw_shape (Sequence[int]): ``(H, W)``.

    Returns:
        Tensor: ``(...)``, one value per leading index (e.g. per head).
    """
    n = hw_shape[0] * hw_shape[1]
    if phi_p.shape[-2:] != (n, n):
        raise ValueError(f'phi_p must end with ({n}, {n}) for hw_shape {tuple(hw_shape)}, '
                         f'got {tuple(phi_p.shape)}')
    dist = pairwise_distances(hw_shape, device=phi_p.device, dtype=phi_p.dtype)
    return (phi_p * dist).mean(dim=(-2, -1))


def position_impact(content_logits: torch.Tensor, log_phi_p: torch.Tensor) -> torch.Tensor:
    """Psi (Eq. 12): mean total-variation distance that Phi_p makes to the attention.

    Args:
        content_logits (Tensor): ``(..., N, N)`` scaled dot products ``Q K^T tau``.
        log_phi_p (Tensor): ``log Phi_p``, broadcastable to ``content_logits``.

    Returns:
        Tensor: ``(...)`` in ``[0, 1)``; 0 when Phi_p is constant along the keys.
    """
    full = torch.softmax(content_logits + log_phi_p, dim=-1)
    content = torch.softmax(content_logits, dim=-1)
    return 0.5 * (full - content).abs().sum(-1).mean(-1)


def _centre_distances(hw_shape: Sequence[int], dtype=torch.float64) -> torch.Tensor:
    h, w = hw_shape
    centre = (h // 2) * w + (w // 2)
    return pairwise_distances(hw_shape, dtype=dtype)[centre]


def peripheral_radii(hw_shape: Sequence[int],
                     area_fractions: Sequence[float] = DEFAULT_AREA_FRACTIONS) -> List[float]:
    """Radii (normalised units) bounding the peripheral regions on an ``H x W`` grid.

    Radius ``i`` is the smallest distance from the central query such that the disk holds at
    least ``area_fractions[i] * H * W`` tokens (the query itself included).

    Returns:
        list[float]: increasing radii, one per fraction.
    """
    if any(not 0 < a <= 1 for a in area_fractions) or list(area_fractions) != sorted(
            area_fractions):
        raise ValueError(f'area_fractions must be increasing in (0, 1], got {area_fractions}')
    d = _centre_distances(hw_shape).sort().values
    n = d.numel()
    return [float(d[min(n - 1, max(0, math.ceil(a * n) - 1))]) for a in area_fractions]


def peripheral_regions(hw_shape: Sequence[int], radii: Optional[Sequence[float]] = None,
                       device=None) -> torch.Tensor:
    """Region index of every query-key pair: ``(N, N)`` long in ``[0, len(radii)]``.

    0 = central (``d <= radii[0]``), ..., ``len(radii)`` = beyond the last radius.
    """
    radii = peripheral_radii(hw_shape) if radii is None else list(radii)
    dist = pairwise_distances(hw_shape, device=device, dtype=torch.float64)
    bounds = torch.tensor(radii, dtype=torch.float64, device=dist.device) + 1e-9
    return torch.bucketize(dist, bounds)


def gate_extent(phi_p: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
    """Radius of each head's attended region: per query, the largest distance of a key whose
    gate is at least half the query's largest gate; averaged over the queries. A flat gate
    reaches the farthest key, a one-hot gate has extent 0.

    Args:
        phi_p (Tensor): ``(..., N, N)``.

    Returns:
        Tensor: ``(...)`` in normalised units.
    """
    dist = pairwise_distances(hw_shape, device=phi_p.device, dtype=phi_p.dtype)
    inside = phi_p >= 0.5 * phi_p.amax(-1, keepdim=True)
    return torch.where(inside, dist, torch.zeros_like(dist)).amax(-1).mean(-1)


def classify_heads(phi_p: torch.Tensor, hw_shape: Sequence[int],
                   radii: Optional[Sequence[float]] = None) -> List[str]:
    """Peripheral region of each head (Eq. 11): the interval of :func:`peripheral_radii`
    that the head's :func:`gate_extent` falls in.

    Args:
        phi_p (Tensor): ``(heads, N, N)``.
        hw_shape (Sequence[int]): ``(H, W)``.
        radii (Sequence[float], optional): Defaults to :func:`peripheral_radii`.

    Returns:
        list[str]: one of :data:`REGIONS` per head.
    """
    radii = peripheral_radii(hw_shape) if radii is None else list(radii)
    bounds = torch.tensor(radii, dtype=torch.float64) + 1e-9
    extent = gate_extent(phi_p.detach().double().cpu(), hw_shape).reshape(-1)
    return [REGIONS[min(int(i), len(REGIONS) - 1)] for i in torch.bucketize(extent, bounds)]


@torch.no_grad()
def collect_phi_p(model: torch.nn.Module, hw_shape: Sequence[int]) -> List[torch.Tensor]:
    """Phi_p ``(heads, N, N)`` of every :class:`PeripheralPositionEncoding` in ``model``, in
    module order (the layers of a PerViT or of a PEViT with ``PeripheralPE``)."""
    return [
        m.compute(hw_shape, log=False).float().cpu() for m in model.modules()
        if isinstance(m, PeripheralPositionEncoding)
    ]


def plot_phi_p(phis: Sequence[torch.Tensor], hw_shape: Sequence[int], out_file: str,
               query: Optional[Sequence[int]] = None, sort_by_nonlocality: bool = True) -> str:
    """PNG of Phi_p for every layer (columns) and head (rows) at one query.

    Args:
        phis (Sequence[Tensor]): ``(heads, N, N)`` per layer (see :func:`collect_phi_p`).
        hw_shape (Sequence[int]): ``(H, W)``.
        out_file (str): PNG path.
        query (Sequence[int], optional): ``(qy, qx)``. Defaults to the centre.
        sort_by_nonlocality (bool): Order the heads of each layer by Omega (as the official
            visualisation). Defaults to True.

    Returns:
        str: ``out_file``.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    h, w = hw_shape
    qy, qx = (h // 2, w // 2) if query is None else query
    if not (0 <= qy < h and 0 <= qx < w):
        raise ValueError(f'query {(qy, qx)} outside the {h}x{w} grid')
    heads = max(p.shape[0] for p in phis)
    fig, axes = plt.subplots(heads, len(phis), squeeze=False,
                             figsize=(1.6 * len(phis) * max(w / h, 0.5), 1.6 * heads))
    for col, phi in enumerate(phis):
        omega = nonlocality(phi, hw_shape)
        order = omega.argsort() if sort_by_nonlocality else torch.arange(phi.shape[0])
        for row in range(heads):
            ax = axes[row][col]
            ax.set_axis_off()
            if row >= phi.shape[0]:
                continue
            hd = int(order[row])
            ax.imshow(phi[hd, qy * w + qx].reshape(h, w).numpy(), interpolation='nearest')
            ax.add_patch(Rectangle((qx - 0.5, qy - 0.5), 1, 1, fill=False, edgecolor='r',
                                   linewidth=1.5))
            ax.set_title(f'L{col} H{hd} Ω={float(omega[hd]):.2f}', fontsize=6)
    fig.tight_layout()
    dirname = osp.dirname(osp.abspath(out_file))
    if dirname:
        import os
        os.makedirs(dirname, exist_ok=True)
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file
