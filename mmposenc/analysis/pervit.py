"""Measures and figures of PerViT's attention heads. See docs/methods/pervit.md."""
import math
import os
import os.path as osp
from typing import Dict, List, Optional, Sequence

import torch

from mmposenc.models.layers.generators.peripheral import (PeripheralPositionEncoding,
                                                          pairwise_distances)

REGIONS = ('central', 'para-central', 'mid-peripheral', 'far-peripheral')
#: theta_p of Eq. 37 (degrees): central, para-central, mid and far peripheral
REGION_ANGLES = (5.0, 40.0, 120.0, 220.0)
#: the whole visual field of Eq. 37 (degrees)
VISUAL_FIELD = 220.0
#: region colours of the figures
REGION_COLORS = ('#d62728', '#ff7f0e', '#2ca02c', '#1f77b4')


def _check_square(phi: torch.Tensor, hw_shape: Sequence[int], name: str = 'phi'):
    n = hw_shape[0] * hw_shape[1]
    if phi.shape[-2:] != (n, n):
        raise ValueError(f'{name} must end with ({n}, {n}) for hw_shape {tuple(hw_shape)}, '
                         f'got {tuple(phi.shape)}')


def nonlocality(phi: torch.Tensor, hw_shape: Sequence[int]) -> torch.Tensor:
    """The nonlocality Omega (Eq. 13) of attention maps: the mean of ``Phi[q, k] ||q - k||``.

    Args:
        phi (Tensor): ``(..., N, N)`` attention(s), queries x keys, ``N = H * W``.
        hw_shape (Sequence[int]): ``(H, W)``.

    Returns:
        Tensor: ``(...)``, one value per leading index (e.g. per head).
    """
    _check_square(phi, hw_shape)
    dist = pairwise_distances(hw_shape, device=phi.device, dtype=phi.dtype)
    return (phi * dist).mean(dim=(-2, -1))


def impact(phi_a: torch.Tensor, phi_x: torch.Tensor) -> torch.Tensor:
    """The impact Psi (Eq. 12): ``1 / ||Phi_a - Phi_x||_F`` over the last two dimensions.

    ``Phi_x`` is Phi_p (Psi_p) or Phi_c (Psi_c); ``inf`` where they are equal.

    Args:
        phi_a (Tensor): ``(..., N, N)`` mixed attention ``Phi_c * Phi_p``.
        phi_x (Tensor): broadcastable to ``phi_a``.

    Returns:
        Tensor: ``(...)``.
    """
    return torch.linalg.matrix_norm(phi_a - phi_x, ord='fro').reciprocal()


def region_radii(hw_shape: Sequence[int], angles: Sequence[float] = REGION_ANGLES,
                 field: float = VISUAL_FIELD) -> List[float]:
    """The radii of the peripheral regions (Eq. 38), in token steps.

    ``r_p = sqrt(H W theta_p / (field pi))``.

    Returns:
        list[float]: one radius per angle (14 x 14: 1.19, 3.37, 5.83, 7.90).
    """
    if any(a <= 0 for a in angles) or list(angles) != sorted(angles):
        raise ValueError(f'angles must be increasing and positive, got {angles}')
    n = hw_shape[0] * hw_shape[1]
    return [math.sqrt(n * a / (field * math.pi)) for a in angles]


def token_distances(hw_shape: Sequence[int], device=None,
                    dtype=torch.float64) -> torch.Tensor:
    """The distances ``||q - k||`` between tokens, in token steps: ``(N, N)``."""
    h, w = hw_shape
    gy, gx = torch.meshgrid(torch.arange(h, device=device, dtype=dtype),
                            torch.arange(w, device=device, dtype=dtype), indexing='ij')
    grid = torch.stack([gy, gx], dim=-1).reshape(-1, 2)
    return torch.cdist(grid, grid, compute_mode='donot_use_mm_for_euclid_dist')


def region_masks(hw_shape: Sequence[int], radii: Optional[Sequence[float]] = None,
                 device=None) -> torch.Tensor:
    """The pairs ``(q, k)`` of each region, ``(regions, N, N)`` bool.

    Region ``p`` holds the distances in ``[r_(p-1), r_p)``; pairs at ``r_last`` or farther are
    in none (Eq. 36).
    """
    radii = region_radii(hw_shape) if radii is None else list(radii)
    d = token_distances(hw_shape, device=device)
    bounds = [0.0] + radii
    return torch.stack([(d >= lo) & (d < hi) for lo, hi in zip(bounds[:-1], bounds[1:])])


#: the region scores of :func:`region_scores`: the mean inside each region (default, as the
#: sentence before Eq. 11 says) or Eq. 11 / 36 as printed (divided by ``|P|^2``)
NORMALIZE_MODES = ('mean', 'eq11')


def region_scores(phi: torch.Tensor, hw_shape: Sequence[int],
                  radii: Optional[Sequence[float]] = None,
                  normalize: str = 'mean') -> torch.Tensor:
    """The score of every peripheral region (Eq. 11, 36): ``(..., regions)``.

    Args:
        phi (Tensor): ``(..., N, N)``, queries x keys.
        hw_shape (Sequence[int]): ``(H, W)``.
        radii (Sequence[float], optional): Defaults to :func:`region_radii`.
        normalize (str): ``'mean'`` is the mean of ``phi[q, k]`` over the pairs in the
            region, 0 for an empty region. ``'eq11'`` is Eq. 11 as printed: the sum over
            ``|P|^2``. Defaults to 'mean'.

    Returns:
        Tensor: ``(..., regions)`` in the order of :data:`REGIONS`.

    Examples:
        >>> ones = torch.ones(25, 25, dtype=torch.float64)  # uniform, 5 x 5 tokens
        >>> region_scores(ones, (5, 5))  # the same mean in every region
        tensor([1., 1., 1., 1.], dtype=torch.float64)
        >>> (region_scores(ones, (5, 5), normalize='eq11') * 625).round()  # pairs per region
        tensor([ 25.,  80., 124.,  96.], dtype=torch.float64)
    """
    if normalize not in NORMALIZE_MODES:
        raise ValueError(f"normalize must be 'mean' or 'eq11', got {normalize!r}")
    _check_square(phi, hw_shape)
    masks = region_masks(hw_shape, radii, device=phi.device).to(phi.dtype)
    sums = torch.einsum('...qk,rqk->...r', phi, masks)
    if normalize == 'eq11':
        return sums / phi.shape[-1]**2
    return sums / masks.sum(dim=(-2, -1)).clamp_min(1)


def classify_heads(phi_p: torch.Tensor, hw_shape: Sequence[int],
                   radii: Optional[Sequence[float]] = None,
                   normalize: str = 'mean') -> List[str]:
    """Peripheral region of each head (Eq. 11): the argmax of :func:`region_scores`.

    Ties go to the inner region (a uniform ``Phi_p`` is central with ``'mean'``).

    Args:
        phi_p (Tensor): ``(heads, N, N)``.
        hw_shape (Sequence[int]): ``(H, W)``.
        radii (Sequence[float], optional): Defaults to :func:`region_radii`.
        normalize (str): ``'mean'`` or ``'eq11'``, see :func:`region_scores`. Defaults to
            'mean'.

    Returns:
        list[str]: one of :data:`REGIONS` per head.

    Examples:
        >>> phi = torch.full((1, 25, 25), 0.5, dtype=torch.float64)
        >>> _ = phi[0].fill_diagonal_(1.0)  # the query itself scores highest
        >>> classify_heads(phi, (5, 5)), classify_heads(phi, (5, 5), normalize='eq11')
        (['central'], ['mid-peripheral'])
    """
    scores = region_scores(phi_p.detach().double(), hw_shape, radii, normalize)
    return [REGIONS[int(i)] for i in scores.reshape(-1, scores.shape[-1]).argmax(-1)]


@torch.no_grad()
def collect_phi_p(model: torch.nn.Module, hw_shape: Sequence[int]) -> List[torch.Tensor]:
    """The Phi_p ``(heads, N, N)`` of every :class:`PeripheralPositionEncoding` in ``model``."""
    return [
        m.compute(hw_shape, log=False).float().cpu() for m in model.modules()
        if isinstance(m, PeripheralPositionEncoding)
    ]


def _central_transforms(block) -> int:
    """The transformations of a block counted as central in Fig. 5 (footnote 7)."""
    cpe = 1 if getattr(block, 'cpe', None) is not None else 0
    return cpe + (2 if hasattr(block, 'mlp') else 0)


@torch.no_grad()
def attention_measures(model: torch.nn.Module, batches, normalize: str = 'mean') -> Dict:
    """Psi, Omega and the peripheral regions of every MPA layer and head over images.

    Args:
        model (nn.Module): A PerViT backbone, or a model whose ``backbone`` is one (or any
            model with :class:`~mmposenc.models.layers.MPA` layers); put in eval mode.
        batches (Iterable[Tensor]): Preprocessed image batches ``(B, 3, H, W)``.
        normalize (str): ``'mean'`` or ``'eq11'``, see :func:`region_scores`. Defaults to
            'mean'.

    Returns:
        dict: ``num_images``, ``hw_shape``, ``radii`` and ``layers``: one dict per MPA with
        ``psi_p``, ``psi_c``, ``omega_p``, ``omega_c``, ``omega_a`` (lists over heads; Psi
        and Omega_c / Omega_a averaged over the images; None where the layer has no Phi_p or
        no Phi_c), ``region_scores`` (heads x regions), ``regions`` (names) and
        ``central_transforms`` (CPE + FFN of the block, counted as central in Fig. 5).
    """
    from mmposenc.models.layers import MPA
    net = getattr(model, 'backbone', model)
    mpas = [m for m in net.modules() if isinstance(m, MPA)]
    if not mpas:
        raise ValueError('the model has no MPA layer')
    owners = {id(m.attn): m for m in net.modules() if isinstance(getattr(m, 'attn', None), MPA)}
    sums = [dict() for _ in mpas]
    state = dict(hw_shape=None, phi_p=[None] * len(mpas))

    def hook(index):

        def fn(module, args):
            x, hw_shape = args[0], tuple(int(v) for v in args[1])
            maps = {k: v.double() for k, v in module.attention_maps(x, hw_shape).items()}
            state['hw_shape'] = hw_shape
            state['phi_p'][index] = maps['phi_p']
            values = dict(
                psi_p=impact(maps['phi_a'], maps['phi_p']),
                psi_c=impact(maps['phi_a'], maps['phi_c']),
                omega_c=nonlocality(maps['phi_c'], hw_shape),
                omega_a=nonlocality(maps['phi_a'], hw_shape))
            for k, v in values.items():  # (B, heads): summed over the images
                sums[index][k] = sums[index].get(k, 0) + v.sum(0)

        return fn

    handles = [m.register_forward_pre_hook(hook(i)) for i, m in enumerate(mpas)]
    num_images = 0
    try:
        for images in batches:
            net(images)
            num_images += images.shape[0]
    finally:
        for h in handles:
            h.remove()
    if num_images == 0:
        raise ValueError('no images')
    hw_shape = state['hw_shape']
    radii = region_radii(hw_shape)
    layers = []
    for i, m in enumerate(mpas):
        phi_p = state['phi_p'][i]
        mean = {k: (v / num_images).tolist() for k, v in sums[i].items()}
        scores = region_scores(phi_p, hw_shape, radii, normalize) if m.with_phi_p else None
        owner = owners.get(id(m))
        layers.append(
            dict(psi_p=mean['psi_p'] if m.with_phi_p and m.with_phi_c else None,
                 psi_c=mean['psi_c'] if m.with_phi_p and m.with_phi_c else None,
                 omega_p=nonlocality(phi_p, hw_shape).tolist() if m.with_phi_p else None,
                 omega_c=mean['omega_c'] if m.with_phi_c else None,
                 omega_a=mean['omega_a'],
                 region_scores=None if scores is None else scores.tolist(),
                 regions=None if scores is None else [REGIONS[int(j)]
                                                      for j in scores.argmax(-1)],
                 central_transforms=0 if owner is None else _central_transforms(owner)))
    return dict(num_images=num_images, hw_shape=list(hw_shape), radii=radii,
                normalize=normalize, layers=layers)


def region_counts(result: Dict) -> List[List[int]]:
    """The number of transformations in each region per layer, the bars of Fig. 5."""
    counts = []
    for layer in result['layers']:
        row = [0] * len(REGIONS)
        for r in layer['regions'] or []:
            row[REGIONS.index(r)] += 1
        row[0] += layer['central_transforms']
        counts.append(row)
    return counts


def _pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out_file: str) -> str:
    dirname = osp.dirname(osp.abspath(out_file))
    os.makedirs(dirname, exist_ok=True)
    fig.savefig(out_file, dpi=100)
    _pyplot().close(fig)
    return out_file


def plot_regions(result: Dict, out_file: str, title: str = '') -> str:
    """Fig. 5: a pie of the region proportions and stacked bars of the per-layer counts."""
    plt = _pyplot()
    counts = torch.tensor(region_counts(result), dtype=torch.float64)
    total = counts.sum(0)
    fig, (ax_pie, ax_bar) = plt.subplots(1, 2, figsize=(10, 3.6),
                                         gridspec_kw=dict(width_ratios=[1, 2]))
    keep = [i for i in range(len(REGIONS)) if total[i] > 0]
    ax_pie.pie([float(total[i]) for i in keep], labels=[REGIONS[i] for i in keep],
               colors=[REGION_COLORS[i] for i in keep], autopct='%1.0f%%',
               textprops=dict(fontsize=8))
    ax_pie.set_title(title or 'peripheral regions')
    layers = torch.arange(1, counts.shape[0] + 1).numpy()
    bottom = torch.zeros(counts.shape[0], dtype=torch.float64)
    for i, name in enumerate(REGIONS):
        ax_bar.bar(layers, counts[:, i].numpy(), bottom=bottom.numpy(), color=REGION_COLORS[i],
                   label=name)
        bottom += counts[:, i]
    ax_bar.set_xlabel('layer')
    ax_bar.set_ylabel('# transformations')
    ax_bar.set_xticks(layers)
    ax_bar.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, out_file)


def _per_head_panel(ax, values: List[Optional[List[float]]], label: str, color: str):
    """Bars per head within each layer and the trendline of the layer means."""
    heads = max((len(v) for v in values if v), default=0)
    width = 0.8 / max(heads, 1)
    xs, means = [], []
    for li, v in enumerate(values, start=1):
        if not v:
            continue
        finite = [x for x in v if math.isfinite(x)]
        for h, x in enumerate(v):
            if math.isfinite(x):
                ax.bar(li - 0.4 + (h + 0.5) * width, x, width, color=color, alpha=0.5)
        if finite:
            xs.append(li)
            means.append(sum(finite) / len(finite))
    ax.plot(xs, means, '-o', color=color, label=label, markersize=3)
    ax.set_xlabel('layer')
    ax.set_xticks(range(1, len(values) + 1))
    ax.legend(fontsize=8)


def plot_impact(result: Dict, out_file: str) -> str:
    """Fig. 7: Psi_p and Psi_c per layer (bars: heads; line: layer mean)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, key, color in zip(axes, ('psi_p', 'psi_c'), ('#1f77b4', '#d62728')):
        _per_head_panel(ax, [layer[key] for layer in result['layers']],
                        {'psi_p': 'Ψp', 'psi_c': 'Ψc'}[key], color)
        ax.set_ylabel('impact')
    fig.tight_layout()
    return _save(fig, out_file)


def plot_nonlocality(result: Dict, out_file: str) -> str:
    """Fig. 8: Omega_p, Omega_c and Omega_a per layer (bars: heads; lines: layer means)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2), sharey=True)
    for ax, key, color in zip(axes, ('omega_p', 'omega_c', 'omega_a'),
                              ('#1f77b4', '#d62728', '#2ca02c')):
        _per_head_panel(ax, [layer[key] for layer in result['layers']],
                        {'omega_p': 'Ωp', 'omega_c': 'Ωc', 'omega_a': 'Ωa'}[key], color)
    axes[0].set_ylabel('nonlocality')
    fig.tight_layout()
    return _save(fig, out_file)


def plot_phi_p(phis: Sequence[torch.Tensor], hw_shape: Sequence[int], out_file: str,
               query: Optional[Sequence[int]] = None, sort_by_nonlocality: bool = True) -> str:
    """Fig. 4: PNG of Phi_p for every layer (columns) and head (rows) at one query.

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
    plt = _pyplot()
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
    return _save(fig, out_file)
