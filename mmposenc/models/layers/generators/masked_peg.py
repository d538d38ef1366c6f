"""Position Encoding Generator for padded batches (DETR-style ``key_padding_mask``).

CPVT's PEG (a depthwise convolution on the token grid, added to the tokens) is only well
defined on an image-sized grid. Detection batches pad every image to a common size, so a plain
PEG mixes padding into the border tokens and into the BatchNorm statistics. :class:`MaskedPEG`
makes the result of every valid token independent of the padding of its batch:

- padded tokens are zeroed before the convolution, so a valid token at the border of its image
  sees exactly the zero padding it would see if the image were alone;
- BatchNorm statistics (training) are computed over valid tokens only, running statistics are
  updated from those: the convolution outputs of the valid tokens are gathered and the
  BatchNorm module normalises them as (n, C) rows (:func:`batch_norm_rows`);
- padded tokens are returned unchanged and nothing computed at a padded position reaches the
  output (the valid rows are added back with one ``index_add``), so no gradient flows into the
  projection from padded tokens.

The tokens are viewed as a channels-last map (no transposes), all levels of Deformable-DETR
share one gather and one scatter (:func:`add_level_pegs`), and a batch without padding takes a
path with no mask work at all (also the path traced for ONNX export).

:class:`MultiLevelMaskedPEG` applies the same to the concatenated multi-level tokens of
Deformable-DETR. ``masking='paper'`` (both classes) computes what the paper's own snippet does
instead (CPVT [E] supplementary B.2, Algorithm 2 ``PEGDetection``): the convolution reads the raw
padded tokens, BatchNorm takes its statistics over all positions, padded tokens are restored
afterwards; it exists so that the masking can be ablated (:func:`paper_level_pegs`). This module
is pure torch + mmcv/mmengine (no mmdet import).
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule, ModuleList
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmposenc.registry import MODELS
from ...padding_exact.masks import as_bool_padding_mask


def _check_padding_mask(mask: Tensor, batch_size: int, num_tokens: int,
                        hw_shape: Tuple[int, int], name: str = 'key_padding_mask') -> Tensor:
    """Return ``mask`` as a bool (bs, h*w) tensor or raise a ValueError naming the mismatch."""
    h, w = hw_shape
    if mask.dim() == 3:
        if tuple(mask.shape) != (batch_size, h, w):
            raise ValueError(f'{name} of shape {tuple(mask.shape)} does not match the tokens: '
                             f'expected (bs, h, w) = {(batch_size, h, w)} for hw_shape '
                             f'{(h, w)}')
        mask = mask.reshape(batch_size, h * w)
    elif mask.dim() != 2 or tuple(mask.shape) != (batch_size, num_tokens):
        raise ValueError(f'{name} of shape {tuple(mask.shape)} does not match the tokens: '
                         f'expected (bs, num_tokens) = {(batch_size, num_tokens)}')
    return as_bool_padding_mask(mask, name)


def _check_tokens(x: Tensor, hw_shape: Sequence[int], embed_dims: int) -> Tuple[int, int]:
    if x.dim() != 3:
        raise ValueError(f'expected batch-first tokens (bs, h*w, C), got shape {tuple(x.shape)}')
    if len(hw_shape) != 2:
        raise ValueError(f'hw_shape must be (h, w), got {hw_shape}')
    h, w = hw_shape[0], hw_shape[1]
    if not torch.jit.is_tracing():  # ONNX export: keep the traced sizes (dynamic H, W)
        h, w = int(h), int(w)
    if h * w != x.shape[1]:
        raise ValueError(f'hw_shape {(h, w)} gives {h * w} tokens but the input has '
                         f'{x.shape[1]} (shape {tuple(x.shape)})')
    if x.shape[2] != embed_dims:
        raise ValueError(f'expected {embed_dims} channels, got {x.shape[2]}')
    return h, w


def batch_norm_rows(rows: Tensor, bn: _BatchNorm) -> Tensor:
    """``bn`` on (n, C) rows, each row one position of the batch.

    The BatchNorm module itself computes the statistics and updates its running statistics
    (``momentum``, cumulative average when it is None, ``num_batches_tracked``), so normalising
    the gathered valid tokens of a padded batch is exactly a BatchNorm over the valid tokens.
    """
    n, c = rows.shape
    if isinstance(bn, nn.BatchNorm2d):
        return bn(rows.view(n, c, 1, 1)).view(n, c)
    if isinstance(bn, nn.BatchNorm3d):
        return bn(rows.view(n, c, 1, 1, 1)).view(n, c)
    return bn(rows)  # BatchNorm1d, SyncBatchNorm


def _check_batch_statistics(norm: Optional[_BatchNorm], num_cells, where: str) -> None:
    """Raise a one-line ValueError when ``norm`` would take batch statistics over fewer than
    2 cells (a batch of one very small image in training): torch's own error for it is
    'Expected more than 1 value per channel when training', which names neither the level
    nor the fix."""
    if norm is None or not (norm.training or not norm.track_running_stats
                            or norm.running_mean is None):
        return
    if num_cells < 2:
        mode = ' in training' if norm.training else ''
        raise ValueError(
            f'MaskedPEG{mode}: {where} has {int(num_cells)} valid cell(s) in this batch, but '
            'its BatchNorm needs at least 2 for batch statistics; use larger images (or more '
            'images per batch), or a norm that needs no batch statistics (norm_cfg=None, or '
            'the BatchNorm in eval mode with its running statistics)')


def _level_name(level: int, hw: Tuple[int, int]) -> str:
    return f'level {level} ({hw[0]}x{hw[1]} grid)'


def _shared_name(shapes: Sequence[Tuple[int, int]]) -> str:
    return ('all levels (shared BatchNorm; grids ' +
            ', '.join(f'{h}x{w}' for h, w in shapes) + ')')


def _map_to_rows(y: Tensor) -> Tensor:
    """(bs, C, h, w) -> (bs*h*w, C) rows in token order (a view of a channels-last map)."""
    return y.permute(0, 2, 3, 1).reshape(-1, y.shape[1])


def add_level_pegs(x: Tensor, shapes: Sequence[Tuple[int, int]],
                   key_padding_mask: Optional[Tensor], pegs: Sequence['MaskedPEG'],
                   shared_norm: bool) -> Tensor:
    """``x`` plus the masked PEG term of every level, computed on valid tokens only.

    With padding, per level: depthwise conv of the zero-padded grid (:meth:`MaskedPEG.conv_map`),
    the rows of the valid tokens gathered, BatchNorm + activation on them (per level, or once
    over all levels when ``shared_norm``), and one ``index_add`` of all of them into ``x``:
    padded tokens are returned bit for bit and nothing computed at a padded position reaches the
    output. Without padding every token is valid: conv, BatchNorm and activation run on the
    channels-last maps, with no gather, scatter or mask.

    Args:
        x (Tensor): Tokens (bs, sum_l h_l*w_l, C), levels concatenated in ``shapes`` order.
        shapes (Sequence[tuple]): (h_l, w_l) of each level.
        key_padding_mask (Tensor, optional): Bool (bs, num_tokens), True = padded; None for
            no padding.
        pegs (Sequence[MaskedPEG]): The PEG of each level (the same one repeated for shared
            weights).
        shared_norm (bool): One BatchNorm (of ``pegs[0]``) over the valid tokens of all levels.

    Returns:
        Tensor: Tokens of the shape of ``x``.
    """
    bs, num_tokens, channels = x.shape
    sizes = [h * w for h, w in shapes]
    # split, not slicing: the backward of split is one cat, that of a slice a full-size zero
    # tensor per level
    xs = x.split(sizes, dim=1) if len(sizes) > 1 else [x]
    if key_padding_mask is None and not shared_norm and all(
            isinstance(peg.norm, (nn.BatchNorm2d, nn.SyncBatchNorm, type(None))) for peg in pegs):
        # nothing padded: no gather / scatter / mask (and traceable for export); BatchNorm on
        # the channels-last map (its fastest layout) and one add per level
        outs = []
        for level, (peg, hw, xl) in enumerate(zip(pegs, shapes, xs)):
            y = peg.conv_map(xl, hw)
            if peg.norm is not None:
                _check_batch_statistics(peg.norm, bs * hw[0] * hw[1], _level_name(level, hw))
                y = peg.norm(y)
            if peg.act is not None:
                y = peg.act(y)
            outs.append(xl + y.permute(0, 2, 3, 1).reshape(bs, -1, channels).to(x.dtype))
        return torch.cat(outs, 1) if len(outs) > 1 else outs[0]
    if key_padding_mask is None:
        # shared statistics over all levels (or a BatchNorm1d/3d): normalise rows
        ys = []
        for level, (peg, hw, xl) in enumerate(zip(pegs, shapes, xs)):
            rows = _map_to_rows(peg.conv_map(xl, hw))
            if not shared_norm:
                rows = peg.norm_act_rows(rows, _level_name(level, hw))
            ys.append(rows.view(bs, -1, channels))
        y = torch.cat(ys, 1) if len(ys) > 1 else ys[0]
        if shared_norm:
            y = pegs[0].norm_act_rows(y.reshape(bs * num_tokens, channels),
                                      _shared_name(shapes)).view_as(x)
        return x + y.to(x.dtype)
    masks = key_padding_mask.split(sizes, dim=1) if len(sizes) > 1 else [key_padding_mask]
    values, dest = [], []
    start = 0
    for level, (peg, hw, xl, ml, size) in enumerate(zip(pegs, shapes, xs, masks, sizes)):
        rows = _map_to_rows(peg.conv_map(xl, hw, ml))
        b, t = (~ml).nonzero(as_tuple=True)
        rows = rows.index_select(0, b * size + t)
        if not shared_norm:
            rows = peg.norm_act_rows(rows, _level_name(level, hw))
        values.append(rows)
        dest.append(b * num_tokens + (t + start))
        start += size
    values = torch.cat(values) if len(values) > 1 else values[0]
    if shared_norm:
        values = pegs[0].norm_act_rows(values, _shared_name(shapes))
    dest = torch.cat(dest) if len(dest) > 1 else dest[0]
    out = x.reshape(bs * num_tokens, channels).index_add(0, dest, values.to(x.dtype))
    return out.view_as(x)


MASKING_MODES = ('valid', 'paper')


def paper_level_pegs(x: Tensor, shapes: Sequence[Tuple[int, int]],
                     key_padding_mask: Optional[Tensor], pegs: Sequence['MaskedPEG'],
                     shared_norm: bool) -> Tensor:
    """``x`` plus the PEG term of every level as CPVT's Algorithm 2 (``PEGDetection``) computes it.

    Per level the depthwise convolution runs on the raw token grid, padded tokens included (they
    are not zeroed); BatchNorm (training: batch statistics) and the activation take every
    position, padded ones included; ``x + term`` is returned with the padded tokens put back to
    their input values (the snippet's ``x[mask] = _tmp``). Valid tokens next to the padding, and
    the statistics, therefore depend on the padding of the batch; :func:`add_level_pegs` is the
    exact form.

    Args:
        x (Tensor): Tokens (bs, sum_l h_l*w_l, C), levels concatenated in ``shapes`` order.
        shapes (Sequence[tuple]): (h_l, w_l) of each level.
        key_padding_mask (Tensor, optional): Bool (bs, num_tokens), True = padded.
        pegs (Sequence[MaskedPEG]): The PEG of each level.
        shared_norm (bool): One BatchNorm (of ``pegs[0]``) over all positions of all levels.

    Returns:
        Tensor: Tokens of the shape of ``x``; padded tokens equal their input.
    """
    bs, _, channels = x.shape
    sizes = [h * w for h, w in shapes]
    xs = x.split(sizes, dim=1) if len(sizes) > 1 else [x]
    ys = []
    for level, (peg, hw, xl) in enumerate(zip(pegs, shapes, xs)):
        rows = _map_to_rows(peg.conv_map(xl, hw))  # no padding_mask: raw padded tokens
        if not shared_norm:
            rows = peg.norm_act_rows(rows, _level_name(level, hw))
        ys.append(rows.view(bs, -1, channels))
    y = torch.cat(ys, 1) if len(ys) > 1 else ys[0]
    if shared_norm:
        y = pegs[0].norm_act_rows(y.reshape(-1, channels), _shared_name(shapes)).view_as(x)
    out = x + y.to(x.dtype)
    if key_padding_mask is not None:
        out = torch.where(key_padding_mask.unsqueeze(-1), x, out)
    return out


@MODELS.register_module()
class MaskedPEG(BaseModule):
    """Position Encoding Generator that respects a DETR padding mask.

    `Conditional Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ (the "PEG for detection": depthwise conv + BN + ReLU,
    added to the input), made exact on padded batches::

        out = x + ReLU(BN_valid(DWConv(x with padded tokens set to 0)))   at valid tokens
        out = x                                                        at padded tokens

    For every image of a padded batch the output on its valid tokens equals (up to float
    rounding) the output for that image alone with no padding and no mask, in evaluation mode,
    and in training mode when the batch holds a single image (batch statistics are then those
    of that image's valid tokens). Padded tokens are returned unchanged; the projection never
    receives a gradient from them.

    Args:
        embed_dims (int): Number of channels C of the tokens.
        kernel_size (int): Odd size of the depthwise kernel. Defaults to 3.
        norm_cfg (dict, optional): Config of a BatchNorm layer (``BN``, ``BN1d``, ``SyncBN``),
            whose statistics are masked. None for no normalisation (the convolution then has
            a bias). Defaults to ``dict(type='BN')``.
        act_cfg (dict, optional): Activation after the norm. Defaults to ``dict(type='ReLU')``.
        masking (str): ``'valid'`` (default): the exact form above. ``'paper'``: the paper's
            snippet (CPVT [E] Algorithm 2): the convolution reads the raw padded tokens and
            BatchNorm the statistics of all positions, only the padded tokens' outputs are
            reset to their inputs (:func:`paper_level_pegs`); the ablation of the masking.
        init_cfg (dict or list[dict], optional): Initialisation config. Defaults to None.

    Examples:
        >>> peg = MaskedPEG(embed_dims=32).eval()
        >>> x = torch.randn(2, 6 * 7, 32)
        >>> mask = torch.zeros(2, 6, 7, dtype=torch.bool)
        >>> mask[1, 4:, :] = True  # second image: 4 valid rows
        >>> out = peg(x, hw_shape=(6, 7), key_padding_mask=mask.flatten(1))
        >>> print(out.shape)
        torch.Size([2, 42, 32])
    """

    def __init__(self,
                 embed_dims: int,
                 kernel_size: int = 3,
                 norm_cfg: Optional[dict] = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 masking: str = 'valid',
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if kernel_size % 2 != 1:
            raise ValueError(f'kernel_size must be odd to keep the grid, got {kernel_size}')
        if masking not in MASKING_MODES:
            raise ValueError(f'masking must be one of {MASKING_MODES}, got {masking!r}')
        self.masking = masking
        self.embed_dims = embed_dims
        self.kernel_size = kernel_size
        self.proj = nn.Conv2d(
            embed_dims, embed_dims, kernel_size, padding=kernel_size // 2,
            groups=embed_dims, bias=norm_cfg is None)
        if norm_cfg is None:
            self.norm = None
        else:
            self.norm = build_norm_layer(norm_cfg, embed_dims)[1]
            if not isinstance(self.norm, _BatchNorm):
                raise ValueError('MaskedPEG masks BatchNorm statistics; norm_cfg must build a '
                                 f'BatchNorm, got {type(self.norm).__name__}')
        self.act = build_activation_layer(act_cfg) if act_cfg is not None else None

    def conv_map(self, x: Tensor, hw_shape: Sequence[int],
                 padding_mask: Optional[Tensor] = None) -> Tensor:
        """The positional term before normalisation: depthwise conv of the zero-padded grid.

        The tokens are viewed as a channels-last (bs, C, h, w) map, so neither the input nor
        the output is transposed in memory.

        Args:
            x (Tensor): Tokens (bs, h*w, C); may be a slice along the token axis.
            hw_shape (Sequence[int]): (h, w) of the token grid.
            padding_mask (Tensor, optional): Bool (bs, h*w), True = padded (zeroed first).

        Returns:
            Tensor: Convolution output (bs, C, h, w), channels-last in memory; values at padded
            positions unspecified.
        """
        bs = x.shape[0]
        if padding_mask is not None:
            # index_fill of the padded rows: several times faster than a broadcast masked_fill
            padded_rows = padding_mask.reshape(-1).nonzero().squeeze(1)
            x = x.reshape(-1, self.embed_dims).index_fill(0, padded_rows, 0.)
        feat = x.reshape(bs, hw_shape[0], hw_shape[1], self.embed_dims)
        return self.proj(feat.permute(0, 3, 1, 2))

    def norm_act_rows(self, rows: Tensor, where: str = 'the level') -> Tensor:
        """BatchNorm (batch statistics = these rows in training) and activation of (n, C)
        rows, the projections of the valid tokens only; ``where`` names the rows' level in
        the error raised for fewer than 2 rows in training."""
        if self.norm is not None:
            _check_batch_statistics(self.norm, rows.shape[0], where)
            rows = batch_norm_rows(rows, self.norm)
        if self.act is not None:
            rows = self.act(rows)
        return rows

    def forward(self, x: Tensor, hw_shape: Sequence[int],
                key_padding_mask: Optional[Tensor] = None) -> Tensor:
        """Add the conditional position encoding to the valid tokens.

        Args:
            x (Tensor): Batch-first tokens of shape (bs, h*w, C).
            hw_shape (Sequence[int]): (h, w) of the token grid (row-major flattening).
            key_padding_mask (Tensor, optional): DETR padding mask, bool of shape (bs, h*w)
                (or (bs, h, w)), True at padded tokens. None when nothing is padded.

        Returns:
            Tensor: Tokens of shape (bs, h*w, C); padded tokens equal their input.
        """
        h, w = _check_tokens(x, hw_shape, self.embed_dims)
        if key_padding_mask is not None:
            key_padding_mask = _check_padding_mask(key_padding_mask, x.shape[0], h * w, (h, w))
        level_pegs = paper_level_pegs if self.masking == 'paper' else add_level_pegs
        return level_pegs(x, [(h, w)], key_padding_mask, [self], shared_norm=False)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, kernel_size={self.kernel_size}, '
                f'masking={self.masking!r}')


def _level_shapes(spatial_shapes: Union[Tensor, Sequence[Sequence[int]]]) -> List[Tuple[int, int]]:
    if isinstance(spatial_shapes, Tensor):
        if torch.jit.is_tracing():  # ONNX export: keep the traced sizes (dynamic H, W)
            return [(s[0], s[1]) for s in spatial_shapes.unbind(0)]
        spatial_shapes = spatial_shapes.tolist()
    shapes = [tuple(int(v) for v in s) for s in spatial_shapes]
    if any(len(s) != 2 for s in shapes):
        raise ValueError(f'spatial_shapes must be a list of (h, w), got {shapes}')
    return shapes


@MODELS.register_module()
class MultiLevelMaskedPEG(BaseModule):
    """:class:`MaskedPEG` on the concatenated multi-level tokens of Deformable-DETR.

    The tokens of all levels, concatenated along the sequence axis in the order of
    ``spatial_shapes`` (starting at ``level_start_index``), are split per level, each level gets
    the masked PEG on its own (h_l, w_l) grid with its own slice of the padding mask, and the
    results are concatenated back.

    Args:
        embed_dims (int): Number of channels C.
        num_levels (int): Number of feature levels. Defaults to 4.
        share_weights (bool): One PEG for all levels (its BatchNorm statistics then pool the
            valid tokens of all levels) instead of one PEG per level. Defaults to False.
        kernel_size (int): Depthwise kernel size. Defaults to 3.
        norm_cfg (dict, optional): BatchNorm config. Defaults to ``dict(type='BN')``.
        act_cfg (dict, optional): Activation config. Defaults to ``dict(type='ReLU')``.
        masking (str): ``'valid'`` (exact, default) or ``'paper'`` (CPVT's Algorithm 2 on each
            level, see :class:`MaskedPEG`). Defaults to ``'valid'``.
        init_cfg (dict or list[dict], optional): Initialisation config. Defaults to None.

    Examples:
        >>> peg = MultiLevelMaskedPEG(embed_dims=16, num_levels=2).eval()
        >>> shapes = torch.tensor([[8, 10], [4, 5]])
        >>> x = torch.randn(2, 8 * 10 + 4 * 5, 16)
        >>> print(peg(x, shapes).shape)
        torch.Size([2, 100, 16])
    """

    def __init__(self,
                 embed_dims: int,
                 num_levels: int = 4,
                 share_weights: bool = False,
                 kernel_size: int = 3,
                 norm_cfg: Optional[dict] = dict(type='BN'),
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 masking: str = 'valid',
                 init_cfg: Optional[Union[dict, List[dict]]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.embed_dims = embed_dims
        self.num_levels = num_levels
        self.share_weights = share_weights
        self.pegs = ModuleList([
            MaskedPEG(embed_dims, kernel_size=kernel_size, norm_cfg=norm_cfg, act_cfg=act_cfg,
                      masking=masking)
            for _ in range(1 if share_weights else num_levels)
        ])
        self.masking = masking

    def forward(self,
                x: Tensor,
                spatial_shapes: Union[Tensor, Sequence[Sequence[int]]],
                level_start_index: Optional[Tensor] = None,
                key_padding_mask: Optional[Tensor] = None) -> Tensor:
        """Add the per-level conditional position encodings.

        Args:
            x (Tensor): Concatenated tokens (bs, sum_l h_l*w_l, C).
            spatial_shapes (Tensor | Sequence): (num_levels, 2) level shapes (h_l, w_l).
            level_start_index (Tensor, optional): (num_levels,) start of each level in the
                sequence; checked against ``spatial_shapes`` when given.
            key_padding_mask (Tensor, optional): Bool (bs, sum_l h_l*w_l), True = padded.

        Returns:
            Tensor: Tokens of the shape of ``x``; padded tokens unchanged.
        """
        shapes = _level_shapes(spatial_shapes)
        if not self.share_weights and len(shapes) != self.num_levels:
            raise ValueError(f'got {len(shapes)} levels in spatial_shapes, expected '
                             f'num_levels={self.num_levels}')
        sizes = [h * w for h, w in shapes]
        if x.dim() != 3 or x.shape[1] != sum(sizes):
            raise ValueError(f'spatial_shapes {shapes} give {sum(sizes)} tokens but the input '
                             f'has shape {tuple(x.shape)}')
        if level_start_index is not None and not torch.jit.is_tracing():
            starts = [int(v) for v in torch.as_tensor(level_start_index).tolist()]
            expected = [sum(sizes[:i]) for i in range(len(sizes))]
            if starts != expected:
                raise ValueError(f'level_start_index {starts} does not match spatial_shapes '
                                 f'{shapes} (expected {expected})')
        bs = x.shape[0]
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bs, x.shape[1]):
                raise ValueError(f'key_padding_mask of shape {tuple(key_padding_mask.shape)} '
                                 f'does not match the tokens: expected {(bs, x.shape[1])}')
            key_padding_mask = as_bool_padding_mask(key_padding_mask)
        pegs = [self.pegs[0]] * len(shapes) if self.share_weights else list(self.pegs)
        level_pegs = paper_level_pegs if self.masking == 'paper' else add_level_pegs
        return level_pegs(x, shapes, key_padding_mask, pegs, shared_norm=self.share_weights)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, num_levels={self.num_levels}, '
                f'share_weights={self.share_weights}, masking={self.masking!r}')
