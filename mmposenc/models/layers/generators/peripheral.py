"""Peripheral position encoding of PerViT (Min et al., NeurIPS 2022), for any H x W.

The position-based attention of PerViT (seed Eq. 6-8) is, per head ``h``, query ``q`` and
key ``k``::

    R^(r)  = R * w_r + b_r                        Euclidean distance weighed in D_r ways
    R^(1)  = ReLU(IN(P1(R^(r))))                  peripheral projection 1 (K x K over keys)
    Phi_p  = Sigmoid(IN(P2(R^(1))))               peripheral projection 2, one map per head

where ``R[q, k] = ||p_q - p_k||`` with coordinates normalised to ``[-1, 1]`` along each axis,
``IN`` is an instance norm over the key grid of one query, and the projections are K x K
convolutions over the key grid (no padding: the key grid is extended by ``2 * (K // 2)``
positions on every side, as in the official code).

The ablations of Tables 5 / A3 are options: ``multi_layer=False`` (one projection,
``Phi_p = Sigmoid(IN(P(R)))``), ``kernel_size=1`` (no neighbourhood N), ``with_norms=False``
(Eq. 6 without the instance norms of Eq. 8) and a learnable offset table instead of the
Euclidean distances (``Lrn``, :class:`PeripheralLearnableEmbedding`).

For the paper's design (two projections with norms) this implementation computes exactly the
same function as the official one, with two structural savings that are exact up to float
rounding:

* ``w_r``/``b_r`` and P1 are both linear, and ``R`` depends only on the offset ``k - q``:
  P1's output before the norm is ONE small convolution of the offset-distance image with an
  effective single-channel kernel ``A_o = sum_r W1[o, r] w_r``; every query reads a window of
  it. Nothing of size ``N x N x D_r`` is ever built.
* the query-dependent part (norms, ReLU, P2) runs in query chunks; in training the chunks are
  recomputed in backward (:class:`_ChunkedPeripheral`), so peak memory is the ``heads x N x N``
  output plus one chunk.

In eval mode the (log) gate is cached per ``(H, W, device, dtype)`` and invalidated when any
parameter changes (exact comparison with a snapshot), on ``train()`` and on ``.to()``.
"""
from collections import OrderedDict
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule

from mmposenc.registry import MODELS
from ..grid import position_grid

PPE_INITS = ('peripheral', 'conv', 'rand')
PPE_EMBEDDINGS = ('euc', 'lrn')
#: ``(s_l, v_l)`` of every layer under Table 5's ``conv`` initialisation
CONV_INIT_NORM = (-5.0, 3.0)


def axis_spacing(size: int) -> float:
    """Spacing of ``torch.linspace(-1, 1, size)`` (2 for a single position)."""
    return 2.0 / max(size - 1, 1)


def normalized_grid(hw_shape: Sequence[int], device=None, dtype=None) -> torch.Tensor:
    """Token coordinates ``(y, x)`` in ``[-1, 1]`` along each axis, row-major: PerViT's
    order of :func:`~mmposenc.models.layers.grid.position_grid` with ``'corners'``.

    Args:
        hw_shape (Sequence[int]): ``(H, W)`` of the token grid.

    Returns:
        Tensor: ``(H * W, 2)`` coordinates.
    """
    return position_grid(hw_shape, 'corners', device=device,
                         dtype=dtype or torch.get_default_dtype()).flip(-1)


def pairwise_distances(hw_shape: Sequence[int], device=None, dtype=None) -> torch.Tensor:
    """Euclidean distances ``R[q, k]`` between normalised token coordinates, ``(N, N)``."""
    grid = normalized_grid(hw_shape, device=device, dtype=dtype)
    return torch.cdist(grid, grid, compute_mode='donot_use_mm_for_euclid_dist')


def offset_distance_image(hw_shape: Sequence[int], radius: Tuple[int, int], device=None,
                          dtype=None) -> torch.Tensor:
    """Distance of every integer offset ``(dy, dx)``, ``|dy| <= ry``, ``|dx| <= rx``.

    Offsets are in token steps; the distance uses the normalised spacing of each axis
    (``2 / (H - 1)`` and ``2 / (W - 1)``). Returns a ``(2 ry + 1, 2 rx + 1)`` image whose
    centre is the zero offset.
    """
    h, w = hw_shape
    ry, rx = radius
    dy = torch.arange(-ry, ry + 1, device=device, dtype=dtype) * axis_spacing(h)
    dx = torch.arange(-rx, rx + 1, device=device, dtype=dtype) * axis_spacing(w)
    return torch.sqrt(dy[:, None]**2 + dx[None, :]**2)


def peripheral_init_schedule(num_layers: int,
                             bias_range: Tuple[float, float] = (-5.0, 4.0),
                             weight_range: Tuple[float, float] = (3.0, 0.01)):
    """Per-layer ``(s_l, v_l)`` of the second instance norm (seed Eq. 9).

    ``s_l`` (bias, locality size) goes over ``linspace(-5, 4)`` and ``v_l`` (weight, locality
    strength) over ``linspace(3, 0.01)`` across the layers: local early, global late.

    Returns:
        list[tuple[float, float]]: ``[(s_0, v_0), ..., (s_{L-1}, v_{L-1})]``.
    """
    bias = torch.linspace(bias_range[0], bias_range[1], num_layers, dtype=torch.float64)
    weight = torch.linspace(weight_range[0], weight_range[1], num_layers, dtype=torch.float64)
    return [(float(b), float(v)) for b, v in zip(bias, weight)]


def ppe_init_schedule(init: str, num_layers: int):
    """Per-layer ``(s_l, v_l)`` of an initialisation of Table 5.

    ``'peripheral'``: :func:`peripheral_init_schedule` (Eq. 9); ``'conv'``: ``s_l = -5``,
    ``v_l = 3`` in every layer (Table 5, "conv"); ``'rand'``: the same list as
    ``'peripheral'`` (unused: every Phi_p parameter is drawn at random).

    Returns:
        list[tuple[float, float]]: one ``(s_l, v_l)`` per layer.
    """
    if init not in PPE_INITS:
        raise ValueError(f'init must be one of {PPE_INITS}, got {init!r}')
    if init == 'conv':
        return [CONV_INIT_NORM] * num_layers
    return peripheral_init_schedule(num_layers)


def _uniform_(param: torch.Tensor):
    """U(-1, 1): the random draw of ``init='rand'`` for w_r, b_r, the norms and ``Lrn``."""
    nn.init.uniform_(param, -1.0, 1.0)


@MODELS.register_module()
class PeripheralDistanceEmbedding(BaseModule):
    """The learnable ``w_r``/``b_r`` of PerViT: distance -> ``D_r`` channels (seed Eq. 6).

    One instance is shared by every layer and head of a PerViT (the backbone owns it and hands
    it to each :class:`PeripheralPositionEncoding`). Parameter names follow ``nn.Linear(1, D_r)``.

    Args:
        embed_dims (int): ``D_r``. Defaults to 16 (``4 * num_heads`` for PerViT-T).
        init (str): ``'peripheral'`` (``w_r = -c1``, ``b_r = 0``; Eq. 9) or ``'conv'`` (same),
            or ``'rand'`` (``nn.Linear`` default). Defaults to ``'peripheral'``.
        c1 (float): Defaults to 0.02.
        init_cfg (dict, optional): Defaults to None.

    Examples:
        >>> embed = PeripheralDistanceEmbedding(16)
        >>> embed.weight.shape
        torch.Size([16, 1])
    """

    def __init__(self, embed_dims: int = 16, init: str = 'peripheral', c1: float = 0.02,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if init not in PPE_INITS:
            raise ValueError(f'init must be one of {PPE_INITS}, got {init!r}')
        self.embed_dims = embed_dims
        self.init = init
        self.c1 = c1
        self.weight = nn.Parameter(torch.empty(embed_dims, 1))
        self.bias = nn.Parameter(torch.empty(embed_dims))
        self.reset_parameters()

    def reset_parameters(self):
        if self.init == 'rand':
            # nn.Linear(1, D_r) default: U(-1, 1) for fan_in = 1
            _uniform_(self.weight)
            _uniform_(self.bias)
        else:
            nn.init.constant_(self.weight, -self.c1)
            nn.init.zeros_(self.bias)

    def init_weights(self):
        """Restore the configured initialisation; an own ``init_cfg`` is applied after it."""
        self.reset_parameters()
        if self.init_cfg is not None:
            super().init_weights()

    def forward(self, dist: torch.Tensor) -> torch.Tensor:
        """``(...,)`` distances -> ``(..., D_r)``."""
        return dist[..., None] * self.weight[:, 0] + self.bias

    def offset_image(self, hw_shape: Sequence[int], radius: Tuple[int, int]) -> torch.Tensor:
        """``R`` of every integer offset ``|dy| <= ry, |dx| <= rx``: ``(D_r, 2ry+1, 2rx+1)``."""
        w = self.weight
        dist = offset_distance_image(hw_shape, radius, device=w.device, dtype=w.dtype)
        return self.forward(dist).permute(2, 0, 1)

    def extra_repr(self) -> str:
        return f'embed_dims={self.embed_dims}, init={self.init!r}'


class PeripheralLearnableEmbedding(BaseModule):
    """``Lrn`` of PerViT Table 5: a learnable ``D_r``-vector per relative offset instead of
    ``w_r * ||q - k||``.

    One table over the offsets ``k - q`` of the training grid ``ref_hw_shape`` (extended by
    ``radius_pad`` keys on every side, what the peripheral projections read), shared by every
    layer and head like ``w_r``. Other grids resample it (bicubic, ``align_corners=True``,
    so the extreme offsets stay on the table's border; our choice, the paper trains at 14 x 14
    only).

    Args:
        embed_dims (int): ``D_r``. Defaults to 16.
        ref_hw_shape (Sequence[int]): Grid the table is laid out for. Defaults to (14, 14).
        radius_pad (int): Extra offsets on every side (``(K // 2)`` per projection).
            Defaults to 2.
        init (str): ``'peripheral'`` / ``'conv'``: the table starts as the Euclidean
            embedding of Eq. 9 (``-c1 * ||k - q||`` in every channel), so ``Lrn`` and ``Euc``
            compute the same Phi_p before training; ``'rand'``: U(-1, 1).
            Defaults to 'peripheral'.
        c1 (float): Defaults to 0.02.
        init_cfg (dict, optional): Defaults to None.

    Examples:
        >>> emb = PeripheralLearnableEmbedding(16)
        >>> emb.table.shape
        torch.Size([16, 31, 31])
        >>> emb.offset_image((7, 9), (8, 10)).shape
        torch.Size([16, 17, 21])
    """

    def __init__(self, embed_dims: int = 16, ref_hw_shape: Sequence[int] = (14, 14),
                 radius_pad: int = 2, init: str = 'peripheral', c1: float = 0.02,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if init not in PPE_INITS:
            raise ValueError(f'init must be one of {PPE_INITS}, got {init!r}')
        self.embed_dims = embed_dims
        self.ref_hw_shape = tuple(int(v) for v in ref_hw_shape)
        self.radius_pad = radius_pad
        self.init = init
        self.c1 = c1
        h, w = self.ref_hw_shape
        self.ref_radius = (h - 1 + radius_pad, w - 1 + radius_pad)
        self.table = nn.Parameter(
            torch.empty(embed_dims, 2 * self.ref_radius[0] + 1, 2 * self.ref_radius[1] + 1))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        if self.init == 'rand':
            _uniform_(self.table)
        else:
            dist = offset_distance_image(self.ref_hw_shape, self.ref_radius, dtype=torch.float64)
            self.table.copy_((-self.c1 * dist).expand_as(self.table))

    def init_weights(self):
        """Restore the configured initialisation; an own ``init_cfg`` is applied after it."""
        self.reset_parameters()
        if self.init_cfg is not None:
            super().init_weights()

    def offset_image(self, hw_shape: Sequence[int], radius: Tuple[int, int]) -> torch.Tensor:
        """``R`` of every integer offset ``|dy| <= ry, |dx| <= rx``: ``(D_r, 2ry+1, 2rx+1)``."""
        radius = tuple(int(r) for r in radius)
        if radius == self.ref_radius:
            return self.table
        size = (2 * radius[0] + 1, 2 * radius[1] + 1)
        return F.interpolate(self.table[None], size=size, mode='bicubic',
                             align_corners=True)[0]

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, ref_hw_shape={self.ref_hw_shape}, '
                f'radius_pad={self.radius_pad}, init={self.init!r}')


def build_peripheral_embedding(embedding: str = 'euc', embed_dims: int = 16,
                               init: str = 'peripheral', kernel_size: int = 3,
                               multi_layer: bool = True,
                               ref_hw_shape: Sequence[int] = (14, 14)) -> BaseModule:
    """The shared ``R`` of a PerViT: ``'euc'`` (``w_r``, :class:`PeripheralDistanceEmbedding`)
    or ``'lrn'`` (:class:`PeripheralLearnableEmbedding`, padded for the projections)."""
    if embedding == 'euc':
        return PeripheralDistanceEmbedding(embed_dims, init=init)
    if embedding == 'lrn':
        pad = (kernel_size // 2) * (2 if multi_layer else 1)
        return PeripheralLearnableEmbedding(embed_dims, ref_hw_shape=ref_hw_shape,
                                            radius_pad=pad, init=init)
    raise ValueError(f'embedding must be one of {PPE_EMBEDDINGS}, got {embedding!r}')


def _window_affine(conv1_map, norm_w, norm_b, window, eps):
    """First instance norm as a per-(query, channel) affine map of the P1 output.

    Every query normalises its ``kh x kw`` window of ``conv1_map`` (``(c, A, B)``); the window
    statistics come from integral images (float64, no cancellation issues), so the norm
    costs nothing per key. Returns ``scale, shift`` of shape ``(A-kh+1, B-kw+1, c)`` indexed
    by window start (``(H-1-qy, W-1-qx)`` for query ``(qy, qx)``).
    """
    kh, kw = window
    x = conv1_map.double()

    def window_sum(t):
        t = F.pad(t, (1, 0, 1, 0)).cumsum(1).cumsum(2)
        return t[:, kh:, kw:] - t[:, :-kh, kw:] - t[:, kh:, :-kw] + t[:, :-kh, :-kw]

    n = kh * kw
    mean = window_sum(x) / n
    var = (window_sum(x * x) / n - mean * mean).clamp_min(0)
    scale = norm_w.double()[:, None, None] * torch.rsqrt(var + eps)
    shift = norm_b.double()[:, None, None] - scale * mean
    dtype = conv1_map.dtype
    return scale.permute(1, 2, 0).to(dtype), shift.permute(1, 2, 0).to(dtype)


def _query_chunk(conv1_cl, scale, shift, params, hw_shape, pad, chunk, eps2, log):
    """Phi_p (or log Phi_p) of the queries of one chunk.

    Query ``(qy, qx)`` reads the window of the P1 map starting at ``(H-1-qy, W-1-qx)``; the
    chunk ``(r0, r1, c0, c1, q0, q1)`` covers window starts ``[r0, r1) x [c0, c1)``, i.e. the
    queries ``[q0, q1)`` in reverse order (whole rows, or a segment of one row). The windows
    are an overlapping strided view of ``conv1_cl`` (``(A, B, c)``, channels last); norm +
    ReLU materialise them once, channels last, for P2.

    Returns:
        Tensor: ``(heads, q1 - q0, H * W)``, queries in natural (row-major) order.
    """
    proj2_w, proj2_b, norm2_w, norm2_b = params
    r0, r1, c0, c1 = chunk[:4]
    h, w = hw_shape
    kh, kw = h + 2 * pad, w + 2 * pad
    _, b_, c = conv1_cl.shape
    rows, cols = r1 - r0, c1 - c0
    win = conv1_cl.as_strided((rows, cols, kh, kw, c), (b_ * c, c, b_ * c, c, 1),
                              conv1_cl.storage_offset() + (r0 * b_ + c0) * c)
    shift = shift[r0:r1, c0:c1, None, None]
    scale = scale[r0:r1, c0:c1, None, None]
    if torch.is_grad_enabled() and (win.requires_grad or scale.requires_grad):
        x = torch.addcmul(shift, scale, win.contiguous())
    else:  # written straight into a (rows, cols, kh, kw, c) buffer
        x = torch.addcmul(shift, scale, win, out=win.new_empty(win.shape))
    x = F.relu_(x.view(rows * cols, kh, kw, c)).permute(0, 3, 1, 2)  # NCHW, channels last
    x = F.conv2d(x, proj2_w, proj2_b).flatten(2)  # (L, heads, H * W)
    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)  # instance norm
    x = (x - mean) * (torch.rsqrt(var + eps2) * norm2_w[:, None]) + norm2_b[:, None]
    x = F.logsigmoid(x) if log else torch.sigmoid(x)
    return x.flip(0).transpose(0, 1)


def _chunks(hw_shape, queries):
    """Chunks ``(r0, r1, c0, c1, q0, q1)`` of at most ``max(queries, 1)`` queries: whole
    rows of window starts when a row fits, else segments of one row."""
    h, w = hw_shape
    queries = max(1, queries)
    if queries >= w:
        rows = queries // w
        for r0 in range(0, h, rows):
            r1 = min(r0 + rows, h)
            yield r0, r1, 0, w, (h - r1) * w, (h - r0) * w
    else:
        for r0 in range(h):
            base = (h - 1 - r0) * w
            for c0 in range(0, w, queries):
                c1 = min(c0 + queries, w)
                yield r0, r0 + 1, c0, c1, base + w - c1, base + w - c0


class _ChunkedPeripheral(torch.autograd.Function):
    """Query-chunked Phi_p whose backward recomputes each chunk (activation checkpointing
    without concatenation: the output is written into one preallocated tensor)."""

    @staticmethod
    def forward(ctx, conv1_cl, scale, shift, proj2_w, proj2_b, norm2_w, norm2_b, meta):
        hw_shape, pad, queries, eps2, log = meta
        params = (proj2_w, proj2_b, norm2_w, norm2_b)
        n = hw_shape[0] * hw_shape[1]
        out = conv1_cl.new_empty(proj2_w.shape[0], n, n)
        for chunk in _chunks(hw_shape, queries):
            out[:, chunk[4]:chunk[5]] = _query_chunk(conv1_cl, scale, shift, params, hw_shape,
                                                     pad, chunk, eps2, log)
        ctx.save_for_backward(conv1_cl, scale, shift, *params)
        ctx.meta = meta
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hw_shape, pad, queries, eps2, log = ctx.meta
        needs = ctx.needs_input_grad[:7]
        inputs = [t.detach().requires_grad_(need) for t, need in zip(ctx.saved_tensors, needs)]
        need = [t for t in inputs if t.requires_grad]
        grads = [torch.zeros_like(t) for t in need]
        for chunk in _chunks(hw_shape, queries):
            with torch.enable_grad():
                y = _query_chunk(inputs[0], inputs[1], inputs[2], tuple(inputs[3:]), hw_shape,
                                 pad, chunk, eps2, log)
                g = torch.autograd.grad(y, need, grad_out[:, chunk[4]:chunk[5]],
                                        allow_unused=True)
            for acc, gi in zip(grads, g):
                if gi is not None:
                    acc.add_(gi)
        it = iter(grads)
        result = [next(it) if t.requires_grad else None for t in inputs]
        return (*result, None)


@MODELS.register_module()
class PeripheralPositionEncoding(BaseModule):
    """Peripheral position encoding Phi_p of `PerViT <https://arxiv.org/abs/2206.06801>`_.

    Maps the token grid ``(H, W)`` to a position-based attention gate ``(heads, N, N)`` in
    ``(0, 1)`` (``N = H * W``), Eq. 6-8, with the peripheral initialisation of Eq. 9.

    Args:
        num_heads (int): Number of attention heads (output maps).
        distance_embed (PeripheralDistanceEmbedding | PeripheralLearnableEmbedding, optional):
            The shared ``R`` (``w_r``, or the ``Lrn`` table). It is NOT registered as a
            submodule (its owner, e.g. the backbone, holds the parameters once). If None, the
            module creates and owns its own (see ``embedding``). Defaults to None.
        dist_dims (int, optional): ``D_r`` for an owned embedding. Defaults to
            ``4 * num_heads``.
        hidden_dims (int, optional): ``D_hid``. Defaults to ``4 * num_heads``.
        kernel_size (int): ``K`` of the peripheral projections (odd); 1 removes the
            neighbourhood N (Table 5 "Euc + ML"). Defaults to 3.
        multi_layer (bool): Two projections with a ReLU (ML, Eq. 6-8); False: one projection
            ``D_r -> heads`` (Table 5 "Euc", ``Phi_p = Sigmoid(IN(P(R)))``). Defaults to True.
        with_norms (bool): The instance norms of Eq. 8. False gives Eq. 6 as written
            (``Sigmoid(ReLU(P1(R)) P2)``). Eq. 9's initialisation acts through the norms
            (Appendix A): without them the first projection of ``-c1 * ||q - k||`` is negative
            everywhere and the ReLU zeroes it, so two projections without norms need
            ``init='rand'`` (a ValueError says so). Defaults to True.
        embedding (str): ``'euc'`` or ``'lrn'``, for an owned embedding only (a shared one
            brings its own kind). Defaults to 'euc'.
        init (str): Initialisation of Table 5:

            - ``'peripheral'``: Eq. 9, projection weights ``c2 * J``, zero biases, first norm
              1 / 0, second norm ``(v_l, s_l)`` = (``init_norm_weight``, ``init_norm_bias``),
              ``w_r = -c1``.
            - ``'conv'``: the same parameters; its owner gives every layer ``s_l = -5``,
              ``v_l = 3`` (:func:`ppe_init_schedule`), the values here default to them.
            - ``'rand'``: every Phi_p parameter random: projections PyTorch's ``Conv2d``
              default, the norms' weights and biases and ``w_r``/``b_r`` U(-1, 1) (the
              paper does not give the distribution).

            Defaults to ``'peripheral'``.
        init_norm_bias (float): ``s_l``. Defaults to -5.0 (layer 0 of 12).
        init_norm_weight (float): ``v_l``. Defaults to 3.0 (layer 0 of 12).
        c2 (float): Constant of the projection weights. Defaults to 0.02.
        chunk_elems (int): Upper bound on the elements of one query chunk's P1 maps
            (``queries * D_hid * (H + 2p) * (W + 2p)``, at least one query) without
            gradients (eval, cache filling). Defaults to ``2 ** 21`` (8 MB in float32).
        train_chunk_elems (int): The same bound when gradients are needed (larger chunks
            amortise the recomputation). Defaults to ``2 ** 22``.
        with_cp (bool): When more than one chunk is needed, recompute the chunks in backward
            (memory ~ output + one chunk). If False, plain autograd keeps every chunk's
            activations. A single chunk always uses plain autograd. Defaults to True.
        max_cache (int): Shapes kept in the cache (eval mode, or training with every Phi_p
            parameter frozen). Defaults to 2.
        init_cfg (dict, optional): Defaults to None.

    Examples:
        >>> ppe = PeripheralPositionEncoding(num_heads=4)
        >>> ppe(hw_shape=(7, 9)).shape
        torch.Size([4, 63, 63])
        >>> PeripheralPositionEncoding(4, multi_layer=False, kernel_size=1)((7, 9)).shape
        torch.Size([4, 63, 63])
    """

    def __init__(self,
                 num_heads: int,
                 distance_embed: Optional[BaseModule] = None,
                 dist_dims: Optional[int] = None,
                 hidden_dims: Optional[int] = None,
                 kernel_size: int = 3,
                 multi_layer: bool = True,
                 with_norms: bool = True,
                 embedding: str = 'euc',
                 init: str = 'peripheral',
                 init_norm_bias: float = CONV_INIT_NORM[0],
                 init_norm_weight: float = CONV_INIT_NORM[1],
                 c2: float = 0.02,
                 chunk_elems: int = 2**21,
                 train_chunk_elems: int = 2**22,
                 with_cp: bool = True,
                 max_cache: int = 2,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if init not in PPE_INITS:
            raise ValueError(f'init must be one of {PPE_INITS}, got {init!r}')
        if kernel_size % 2 != 1 or kernel_size < 1:
            raise ValueError(f'kernel_size must be a positive odd number, got {kernel_size}')
        if num_heads < 1:
            raise ValueError(f'num_heads must be >= 1, got {num_heads}')
        if multi_layer and not with_norms and init != 'rand':
            raise ValueError(
                f'init={init!r} needs the instance norms with two projections: without them '
                'P1(-c1 * ||q - k||) is negative everywhere, the ReLU zeroes it and Phi_p is '
                'the constant sigmoid(b2) with no gradient to w_r or P1 (Appendix A); use '
                "init='rand' or with_norms=True")
        self.num_heads = num_heads
        self.hidden_dims = hidden_dims or 4 * num_heads
        self.kernel_size = kernel_size
        self.pad = kernel_size // 2
        self.multi_layer = multi_layer
        self.num_proj = 2 if multi_layer else 1
        self.with_norms = with_norms
        self.init = init
        self.init_norm_bias = init_norm_bias
        self.init_norm_weight = init_norm_weight
        self.c2 = c2
        self.chunk_elems = chunk_elems
        self.train_chunk_elems = train_chunk_elems
        self.with_cp = with_cp
        self.max_cache = max_cache

        if distance_embed is None:
            self.distance_embed = build_peripheral_embedding(
                embedding, dist_dims or 4 * num_heads, init=init, kernel_size=kernel_size,
                multi_layer=multi_layer)
            self._shared = ()
        else:
            if not isinstance(distance_embed,
                              (PeripheralDistanceEmbedding, PeripheralLearnableEmbedding)):
                raise TypeError('distance_embed must be a PeripheralDistanceEmbedding or a '
                                'PeripheralLearnableEmbedding, got '
                                f'{type(distance_embed).__name__}')
            if dist_dims is not None and dist_dims != distance_embed.embed_dims:
                raise ValueError(f'dist_dims={dist_dims} does not match the shared distance '
                                 f'embedding ({distance_embed.embed_dims})')
            self.distance_embed = None
            self._shared = (distance_embed, )  # plain attribute: not a submodule
        emb = self.dist_embed
        self.embedding = 'euc' if isinstance(emb, PeripheralDistanceEmbedding) else 'lrn'
        if self.embedding == 'lrn' and emb.radius_pad < self.num_proj * self.pad:
            raise ValueError(f'the Lrn table is padded by {emb.radius_pad} offsets, the '
                             f'projections read {self.num_proj * self.pad}')
        dr = emb.embed_dims
        if multi_layer:
            self.proj1 = nn.Conv2d(dr, self.hidden_dims, kernel_size)
            self.norm1 = nn.GroupNorm(self.hidden_dims, self.hidden_dims) if with_norms \
                else None
            self.proj2 = nn.Conv2d(self.hidden_dims, num_heads, kernel_size)
        else:
            self.proj1 = self.norm1 = None
            self.proj2 = nn.Conv2d(dr, num_heads, kernel_size)
        self.norm2 = nn.GroupNorm(num_heads, num_heads) if with_norms else None
        self.reset_parameters()
        self._cache = OrderedDict()
        self._snapshot = None

    # ------------------------------------------------------------------ init
    @property
    def dist_embed(self) -> BaseModule:
        return self._shared[0] if self._shared else self.distance_embed

    @property
    def projections(self):
        return [m for m in (self.proj1, self.proj2) if m is not None]

    @property
    def norms(self):
        return [m for m in (self.norm1, self.norm2) if m is not None]

    @torch.no_grad()
    def reset_parameters(self):
        if self.init == 'rand':
            for m in self.projections:
                m.reset_parameters()
            for m in self.norms:
                _uniform_(m.weight)
                _uniform_(m.bias)
        else:
            for m in self.projections:
                nn.init.constant_(m.weight, self.c2)
                nn.init.zeros_(m.bias)
            if self.norm1 is not None:
                nn.init.ones_(self.norm1.weight)
                nn.init.zeros_(self.norm1.bias)
            if self.norm2 is not None:
                nn.init.constant_(self.norm2.weight, self.init_norm_weight)
                nn.init.constant_(self.norm2.bias, self.init_norm_bias)
        self.clear_cache()

    def init_weights(self):
        """Restore the configured initialisation (a parent's generic ``Conv2d`` init must not
        overwrite Eq. 9); an own ``init_cfg`` (e.g. ``Pretrained``) is applied after it."""
        self.reset_parameters()
        if self.init_cfg is not None:
            super().init_weights()

    # ----------------------------------------------------------------- cache
    def _parameters_for_cache(self):
        params = [p for m in self.projections + self.norms for p in (m.weight, m.bias)]
        return params + list(self.dist_embed.parameters())

    def clear_cache(self):
        """Drop every cached gate."""
        self._cache = OrderedDict()
        self._snapshot = None

    def train(self, mode: bool = True):
        self.clear_cache()
        return super().train(mode)

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    def _cache_valid(self) -> bool:
        params = self._parameters_for_cache()
        snap = self._snapshot
        if snap is None or len(snap) != len(params):
            return False
        return all(s.shape == p.shape and s.device == p.device and torch.equal(s, p.detach())
                   for s, p in zip(snap, params))

    # --------------------------------------------------------------- compute
    @property
    def _fused(self) -> bool:
        """The paper's design (two projections with norms) runs the fused path."""
        return self.multi_layer and self.with_norms and not getattr(self, '_force_generic',
                                                                    False)

    def conv1_map(self, hw_shape: Sequence[int]) -> torch.Tensor:
        """P1 output (before its norm) on the offset grid: ``(D_hid, 2H+2p-1, 2W+2p-1)``.

        Query ``(qy, qx)`` reads rows ``H-1-qy ... H-1-qy + H+2p-1`` (same for columns).
        """
        h, w = hw_shape
        p = self.pad
        weight = self.proj1.weight
        emb = self.dist_embed
        radius = (h - 1 + 2 * p, w - 1 + 2 * p)
        if self.embedding == 'lrn':
            image = emb.offset_image(hw_shape, radius).to(weight.dtype)
            return F.conv2d(image[None], weight, self.proj1.bias)[0]
        dist = offset_distance_image(hw_shape, radius, device=weight.device, dtype=weight.dtype)
        kernel = torch.einsum('orkl,r->okl', weight, emb.weight[:, 0].to(weight.dtype))
        const = self.proj1.bias + torch.einsum('orkl,r->o', weight, emb.bias.to(weight.dtype))
        out = F.conv2d(dist[None, None], kernel[:, None])[0]
        return out + const[:, None, None]

    def _chunk_queries(self, hw_shape, grad: bool = False) -> int:
        per_query = self.hidden_dims * (hw_shape[0] + 2 * self.pad) * (
            hw_shape[1] + 2 * self.pad)
        budget = self.train_chunk_elems if grad else self.chunk_elems
        return max(1, budget // per_query)

    def _compute_generic(self, hw_shape, log, chunk_queries=None) -> torch.Tensor:
        """Any design: per query chunk, the windows of ``R`` over the extended key grid go
        through the projections (and norms) as plain convolutions; plain autograd."""
        h, w = hw_shape
        n = h * w
        ext = self.num_proj * self.pad
        weight = self.proj2.weight
        image = self.dist_embed.offset_image(hw_shape, (h - 1 + ext, w - 1 + ext))
        image = image.to(weight.dtype)
        kh, kw = h + 2 * ext, w + 2 * ext
        # windows[:, a, b] starts at offset (-(H-1-a) - ext, ...): query (H-1-a, W-1-b)
        windows = image.unfold(1, kh, 1).unfold(2, kw, 1)  # (D_r, H, W, kh, kw)
        queries = chunk_queries or self._chunk_queries(hw_shape, torch.is_grad_enabled())
        outs = []
        for q0 in range(0, n, max(1, queries)):
            idx = torch.arange(q0, min(q0 + max(1, queries), n), device=image.device)
            x = windows[:, h - 1 - idx // w, w - 1 - idx % w].transpose(0, 1)  # (Q, D_r, kh, kw)
            if self.multi_layer:
                x = F.conv2d(x, self.proj1.weight, self.proj1.bias)
                if self.norm1 is not None:
                    x = self.norm1(x)
                x = F.relu(x)
            x = F.conv2d(x, self.proj2.weight, self.proj2.bias)
            if self.norm2 is not None:
                x = self.norm2(x)
            x = x.flatten(2).transpose(0, 1)  # (heads, Q, H * W)
            outs.append(F.logsigmoid(x) if log else torch.sigmoid(x))
        return torch.cat(outs, dim=1)

    def compute(self, hw_shape: Sequence[int], log: bool = True,
                chunk_queries: Optional[int] = None) -> torch.Tensor:
        """Phi_p (or log Phi_p) without the cache: ``(heads, N, N)``.

        Queries are processed in chunks of at most ``chunk_queries`` (default: as many as fit
        in ``chunk_elems``). ``log=True`` returns ``logsigmoid`` of the pre-activation:
        exactly ``log Phi_p`` and never ``-inf`` (no ``log(0)``), ready as an attention bias.
        """
        hw_shape = tuple(int(s) for s in hw_shape)
        if len(hw_shape) != 2 or min(hw_shape) < 1:
            raise ValueError(f'hw_shape must be (H, W) with H, W >= 1, got {hw_shape}')
        if not self._fused:
            return self._compute_generic(hw_shape, log, chunk_queries)
        h, w = hw_shape
        n = h * w
        conv1_map = self.conv1_map(hw_shape)
        scale, shift = _window_affine(conv1_map, self.norm1.weight, self.norm1.bias,
                                      (h + 2 * self.pad, w + 2 * self.pad), self.norm1.eps)
        conv1_cl = conv1_map.permute(1, 2, 0).contiguous()
        params = (self.proj2.weight, self.proj2.bias, self.norm2.weight, self.norm2.bias)
        eps2 = self.norm2.eps
        needs_grad = torch.is_grad_enabled() and (
            conv1_cl.requires_grad or scale.requires_grad or
            any(t.requires_grad for t in params))
        queries = min(n, chunk_queries or self._chunk_queries(hw_shape, needs_grad))
        if needs_grad and self.with_cp and queries < n:
            meta = (hw_shape, self.pad, queries, eps2, log)
            return _ChunkedPeripheral.apply(conv1_cl, scale, shift, *params, meta)
        if needs_grad:
            chunks = list(_chunks(hw_shape, queries))
            outs = [
                _query_chunk(conv1_cl, scale, shift, params, hw_shape, self.pad, c, eps2, log)
                for c in chunks
            ]
            order = sorted(range(len(chunks)), key=lambda i: chunks[i][4])
            return torch.cat([outs[i] for i in order], dim=1)
        out = conv1_cl.new_empty(self.num_heads, n, n)
        for chunk in _chunks(hw_shape, queries):
            out[:, chunk[4]:chunk[5]] = _query_chunk(conv1_cl, scale, shift, params, hw_shape,
                                                     self.pad, chunk, eps2, log)
        return out

    @property
    def frozen(self) -> bool:
        """True when no Phi_p parameter (``R`` included) requires a gradient."""
        return not any(p.requires_grad for p in self._parameters_for_cache())

    def log_gate(self, hw_shape: Sequence[int]) -> torch.Tensor:
        """``log Phi_p``, ``(heads, N, N)``; served from the cache in eval mode and, when
        every Phi_p parameter is frozen (Table A3 "fixed"), in training too."""
        hw_shape = tuple(int(s) for s in hw_shape)
        if (self.training and not self.frozen) or self.max_cache <= 0:
            return self.compute(hw_shape, log=True)
        w = self.proj2.weight
        key = (hw_shape, w.device, w.dtype)
        if not self._cache_valid():
            self.clear_cache()
            self._snapshot = [p.detach().clone() for p in self._parameters_for_cache()]
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        with torch.no_grad():
            value = self.compute(hw_shape, log=True)
        self._cache[key] = value
        while len(self._cache) > self.max_cache:
            self._cache.popitem(last=False)
        return value

    def forward(self, hw_shape: Sequence[int]) -> torch.Tensor:
        """Phi_p in ``(0, 1)``.

        Args:
            hw_shape (Sequence[int]): ``(H, W)`` token grid.

        Returns:
            Tensor: ``(num_heads, H*W, H*W)``, rows are queries, columns keys (row-major).
        """
        return self.log_gate(hw_shape).exp()

    def extra_repr(self) -> str:
        shared = 'shared' if self._shared else 'owned'
        return (f'num_heads={self.num_heads}, embedding={self.embedding!r} '
                f'(D_r={self.dist_embed.embed_dims}, {shared}), hidden_dims={self.hidden_dims}, '
                f'kernel_size={self.kernel_size}, multi_layer={self.multi_layer}, '
                f'with_norms={self.with_norms}, init={self.init!r}, '
                f'init_norm=({self.init_norm_weight:.4g}, {self.init_norm_bias:.4g}), '
                f'with_cp={self.with_cp}')
