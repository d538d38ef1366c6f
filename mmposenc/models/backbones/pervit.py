"""PerViT backbone (Min et al., NeurIPS 2022) for classification, detection and segmentation."""
from typing import List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import build_dropout
from mmengine.model import BaseModule, ModuleList, Sequential
from mmengine.model.weight_init import constant_init, kaiming_init
from torch.utils.checkpoint import checkpoint

from mmposenc.registry import MODELS
from ..layers.attention.mpa import MPA
from ..layers.generators.peripheral import (PPE_INITS, build_peripheral_embedding,
                                            ppe_init_schedule)
from ..padding_exact.binding import bound_image_shapes
from ..padding_exact.masks import cells_after_stride, masks_from_valid_shapes, strided_shapes
from ..padding_exact.ops import zero_padding

#: The steps of PerViT's padding-exact mode (each can be left out to show it is needed): zero
#: the padded pixels / cells before every stem convolution (``'stem'``) and the padded tokens
#: before every CPE (``'cpe'``); run every MPA on each image's own token grid, Phi_p of that
#: grid and no padded key (``'attention'``); ``-inf`` at the padded cells before the
#: resamplers' max-pooling (``'resample'``); zero the padded cells of the outputs
#: (``'outputs'``).
EXACT_STEPS = frozenset({'stem', 'cpe', 'attention', 'resample', 'outputs'})
#: Stem / resampler norms that are per cell in eval mode (a per-channel affine map).
_PER_CELL_NORMS = ('BN', 'BN2d', 'SyncBN')

Shape = Tuple[int, int]


def _own_cells(size: int, scale: float, token_stride: int) -> int:
    """``ceil(size / stride)``: the cells of an image of ``size`` pixels in a map of stride
    ``token_stride / scale`` (``scale`` a featmap scale: 4, 2, 1, 0.5 or 0.25)."""
    if scale >= 1:
        return cells_after_stride(size * int(scale), token_stride)
    return cells_after_stride(size, token_stride * round(1 / scale))


class PerViTMlp(BaseModule):
    """``fc1 -> GELU -> drop -> fc2 -> drop``; ``fc2`` may change the width (stage change)."""

    def __init__(self, in_dims: int, hidden_dims: int, out_dims: int, drop: float = 0.,
                 act_cfg: dict = dict(type='GELU'), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.fc1 = nn.Linear(in_dims, hidden_dims)
        self.act = MODELS.build(act_cfg)
        self.fc2 = nn.Linear(hidden_dims, out_dims)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class PerViTBlock(BaseModule):
    """One PerViT block: 3x3 depthwise CPE, pre-norm MPA, pre-norm MLP (Eq. 10).

    ``x = x + DropPath(MPA(LN(CPE(x))))`` (the CPE output feeds the attention only; the residual
    is ``x``, as in the official code), then ``x = shortcut(x) + DropPath(MLP(LN(x)))`` where
    the MLP and the linear ``shortcut`` move to the next stage's width in the last block of a
    stage.

    Args:
        embed_dims (int): Input width.
        num_heads (int): Heads.
        out_dims (int, optional): Output width. Defaults to ``embed_dims``.
        mlp_ratio (float): Defaults to 4.
        qkv_bias (bool): Defaults to False (official).
        drop_rate (float): Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        drop_path_rate (float): Defaults to 0.
        norm_cfg (dict): Defaults to ``dict(type='LN', eps=1e-6)``.
        distance_embed (BaseModule, optional): Shared ``R`` (``w_r`` or the ``Lrn`` table).
        ppe_cfg (dict, optional): Arguments of the block's PeripheralPositionEncoding.
        with_phi_p (bool): Phi_p in the MPA (Table 1 (b) without). Defaults to True.
        with_phi_c (bool): Phi_c in the MPA (Table 1 (c) without). Defaults to True.
        with_cpe (bool): The 3x3 depthwise CPE (Table 1 (e) without). Defaults to True.
        init_cfg (dict, optional): Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 out_dims: Optional[int] = None,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = False,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 distance_embed: Optional[BaseModule] = None,
                 ppe_cfg: Optional[dict] = None,
                 with_phi_p: bool = True,
                 with_phi_c: bool = True,
                 with_cpe: bool = True,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        out_dims = out_dims or embed_dims
        self.embed_dims = embed_dims
        self.out_dims = out_dims
        self.cpe = nn.Conv2d(embed_dims, embed_dims, 3, 1, 1, groups=embed_dims) \
            if with_cpe else None
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = MPA(embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop_rate,
                        proj_drop=drop_rate, with_phi_p=with_phi_p, with_phi_c=with_phi_c,
                        distance_embed=distance_embed, ppe_cfg=ppe_cfg)
        self.drop_path = build_dropout(dict(type='DropPath', drop_prob=drop_path_rate))
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.mlp = PerViTMlp(embed_dims, int(embed_dims * mlp_ratio), out_dims, drop=drop_rate)
        self.shortcut = nn.Linear(embed_dims, out_dims) if out_dims != embed_dims else \
            nn.Identity()

    def forward(self, x: torch.Tensor, hw_shape: Sequence[int],
                valid: Optional[Sequence[Shape]] = None,
                steps: frozenset = EXACT_STEPS) -> torch.Tensor:
        """``(B, H*W, C_in) -> (B, H*W, C_out)``.

        ``valid``: ``(rows, cols)`` of the token grid each image owns in a padded batch
        (:class:`PerViT` with ``padding_exact=True``): its padded tokens are zeroed before the
        CPE (the zero padding the image alone has) and the MPA runs on each image's own grid
        (:meth:`own_grid_attention`); None: the stock block.
        """
        b, n, c = x.shape
        y = x
        if self.cpe is not None:
            if valid is not None and 'cpe' in steps:
                x_map = zero_padding(x.transpose(1, 2).reshape(b, c, *hw_shape),
                                     masks_from_valid_shapes(valid, hw_shape, x.device))
            else:
                x_map = x.transpose(1, 2).reshape(b, c, *hw_shape)
            y = self.cpe(x_map).flatten(2).transpose(1, 2)
        y = self.norm1(y)
        if valid is not None and 'attention' in steps:
            attn = self.own_grid_attention(y, hw_shape, valid)
        else:
            attn = self.attn(y, hw_shape)
        x = x + self.drop_path(attn)
        return self.shortcut(x) + self.drop_path(self.mlp(self.norm2(x)))

    def own_grid_attention(self, y: torch.Tensor, hw_shape: Sequence[int],
                           valid: Sequence[Shape]) -> torch.Tensor:
        """The MPA of each image on its own ``rows x cols`` token grid: the computation of
        the image alone (Phi_p depends on the whole grid: coordinates normalised to
        ``[-1, 1]`` over it, instance norms over its keys), images of one grid size batched
        together; zero at the padded tokens.

        Args:
            y (Tensor): Normed tokens ``(B, H*W, C)`` of the padded grid ``hw_shape``.
            hw_shape (Sequence[int]): ``(H, W)``.
            valid (Sequence[tuple[int, int]]): ``(rows, cols)`` owned by each image.

        Returns:
            Tensor: ``(B, H*W, C)``.
        """
        b, n, c = y.shape
        H, W = hw_shape
        grid = y.view(b, H, W, c)
        out = None
        groups = {}
        for i, shape in enumerate(valid):
            groups.setdefault(tuple(shape), []).append(i)
        for (h, w), idx in groups.items():
            idx_t = torch.as_tensor(idx, device=y.device)
            own = self.attn(grid[idx_t, :h, :w].reshape(len(idx), h * w, c), (h, w))
            if out is None:  # the attention's dtype (bfloat16 under autocast)
                out = own.new_zeros(b, H, W, c)
            out[idx_t, :h, :w] = own.view(len(idx), h, w, c)
        return out.view(b, n, c)


class StemConv(nn.Module):
    """One unit of the C-stem: 3x3 stride-2 convolution with a bias, norm, ReLU.

    What mmcv's ``ConvModule(..., bias=True, norm_cfg=BN)`` builds (same names ``conv``,
    ``bn``, ``activate``, same initialisation, also when the parent's ``init_weights`` runs),
    without its "Unnecessary conv bias before batch/instance norm" warning: the official
    PerViT stem has the bias and its checkpoints carry it.

    Args:
        in_channels (int): Input channels.
        out_channels (int): Output channels.
        norm_cfg (dict): The norm layer.
    """

    def __init__(self, in_channels: int, out_channels: int, norm_cfg: dict):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=True)
        self.norm_name, norm = build_norm_layer(norm_cfg, out_channels)
        self.add_module(self.norm_name, norm)
        self.activate = nn.ReLU(inplace=True)
        self.init_weights()

    def init_weights(self):
        kaiming_init(self.conv, a=0, nonlinearity='relu')
        constant_init(getattr(self, self.norm_name), 1, bias=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(getattr(self, self.norm_name)(self.conv(x)))


def _build_resampler(scale: float, channels: int, norm_cfg: dict) -> nn.Module:
    """Stride-16 map -> ``scale`` x its size (ViTDet-style simple feature pyramid)."""
    if scale == 4:
        return Sequential(
            nn.ConvTranspose2d(channels, channels, 2, 2),
            build_norm_layer(norm_cfg, channels)[1], nn.GELU(),
            nn.ConvTranspose2d(channels, channels, 2, 2))
    if scale == 2:
        return nn.ConvTranspose2d(channels, channels, 2, 2)
    if scale == 1:
        return nn.Identity()
    if scale in (0.5, 0.25):
        # ceil_mode: a grid of any size (even 1 x 1) keeps >= 1 cell, and the stride-32 map
        # of an H x W image is ceil(H / 32) x ceil(W / 32) like a conv backbone's
        k = int(round(1 / scale))
        return nn.MaxPool2d(k, k, ceil_mode=True)
    raise ValueError(f'featmap scale must be one of 4, 2, 1, 0.5, 0.25, got {scale}')


def pervit_flops(embed_dims: Sequence[int],
                 depths: Sequence[int],
                 num_heads: int,
                 stem_channels: Sequence[int],
                 img_size: Sequence[int] = (224, 224),
                 mlp_ratio: float = 4.,
                 in_channels: int = 3,
                 conv_stem: bool = True,
                 with_cpe: bool = True,
                 with_phi_c: bool = True,
                 attention_matmul: bool = False) -> int:
    """Multiply-accumulates of a PerViT's convolutions and linear layers for one image.

    This is what the paper's FLOPs count: PerViT-T / S / M give 1.55 / 4.42 / 8.97 G at
    224 x 224, Table A5's 1.6 / 4.4 / 9.0 G. Not counted: the attention products ``Q K^T`` and
    ``A V`` (``attention_matmul=True`` adds their ``2 N^2 C`` per block), Phi_p (it does not
    depend on the image and is computed once per grid at inference), norms, activations,
    softmax and the classifier.

    Returns:
        int: multiply-accumulates.
    """
    h, w = img_size
    macs = 0
    if conv_stem:
        c_in = in_channels
        for c in stem_channels:
            h, w = cells_after_stride(h, 2), cells_after_stride(w, 2)
            macs += h * w * c * c_in * 9
            c_in = c
        macs += h * w * c_in * c_in
    else:
        h, w = cells_after_stride(h, 16), cells_after_stride(w, 16)
        macs += h * w * embed_dims[0] * in_channels * 16 * 16
    n = h * w
    widths = [d for d, k in zip(embed_dims, depths) for _ in range(k)]
    for c, c_out in zip(widths, widths[1:] + widths[-1:]):
        hidden = int(c * mlp_ratio)
        macs += n * c * 9 if with_cpe else 0
        macs += n * c * c * (4 if with_phi_c else 2)  # qkv (or v) and the output projection
        macs += (2 if with_phi_c else 1) * n * n * c if attention_matmul else 0
        macs += n * c * hidden + n * hidden * c_out
        macs += n * c * c_out if c_out != c else 0
    return macs


@MODELS.register_module()
class PerViT(BaseModule):
    """`Peripheral Vision Transformer <https://arxiv.org/abs/2206.06801>`_ backbone.

    A convolutional stem (four stride-2 3x3 conv + BN + ReLU and a 1x1 conv, stride 16), then
    12 PerViT blocks (:class:`PerViTBlock`: depthwise CPE, multi-head peripheral attention
    :class:`~mmposenc.models.layers.MPA`, MLP) in 4 stages of depth ``[2, 2, 6, 2]`` at stride 16.
    The width changes in the last block of each stage. One
    :class:`~mmposenc.models.layers.PeripheralDistanceEmbedding` (``w_r``) is shared by all
    blocks and heads; each block's Phi_p starts from the peripheral initialisation of the
    block's depth (Eq. 9). Any input size runs; Phi_p is cached per grid shape in eval mode.

    Outputs are NCHW maps after the stages in ``out_indices`` (each with its own LayerNorm;
    ``norm3`` is the official final norm), so ImageClassifier (with ``GlobalAveragePooling``),
    and mmdet/mmseg necks consume them. All stages run at stride 16; ``featmap_scales`` can
    resample the outputs to a pyramid (e.g. ``(4, 2, 1, 0.5)`` gives strides 4/8/16/32).

    Dense prediction (``out_indices=(0, 1, 2, 3), featmap_scales=(4, 2, 1, 0.5)``, what mmdet's
    and mmseg's FPN expect): strides 4 / 8 / 16 / 32 with ``out_channels`` (the width after
    each stage) T ``[192, 224, 280, 280]``, S ``[320, 368, 464, 464]``, M ``[468, 540, 684,
    684]``. Any ``H x W`` runs: the stem gives a ``ceil(H / 16) x ceil(W / 16)`` token grid,
    so the maps are ``4, 2, 1`` times it and ``ceil(. / 2)`` of it; for ``H, W`` divisible by
    32 (mmdet pads batches to 32) that is exactly ``H / s x W / s`` for stride ``s``.

    The ablations of Tables 1, 5 and A3 are options (defaults: the paper's PerViT):
    ``with_phi_p``, ``with_phi_c``, ``conv_stem``, ``with_cpe`` (Table 1), ``ppe_init``
    (Table 5 top, Table A3), ``freeze_phi_p`` (Table A3 "fixed"), and through ``ppe_cfg``
    the Phi_p designs of Table 5: ``multi_layer=False`` ("Euc"), ``kernel_size=1`` (without
    N: "Euc + ML"), ``embedding='lrn'`` ("Lrn ..."), ``with_norms=False`` (Eq. 6 as written).

    Args:
        arch (str | dict): ``'tiny'``/``'t'``, ``'small'``/``'s'``, ``'medium'``/``'m'`` (Table
            A5) or a dict with keys ``embed_dims`` (4 widths), ``depths`` (4 ints),
            ``num_heads``, ``stem_channels`` (one stride-2 conv each) and optional
            ``drop_path_rate``.
            Defaults to 'tiny'.
        in_channels (int): Defaults to 3.
        out_indices (int | Sequence[int]): Stages (0-3) whose outputs are returned.
            Defaults to 3.
        featmap_scales (Sequence[float], optional): One scale (4, 2, 1, 0.5 or 0.25) per
            ``out_indices`` entry. Defaults to None (all stride 16).
        mlp_ratio (float): Defaults to 4.
        qkv_bias (bool): Defaults to False.
        drop_rate (float): Defaults to 0.
        attn_drop_rate (float): Defaults to 0.
        drop_path_rate (float, optional): Largest stochastic depth (linear in depth).
            Defaults to the arch's value: 0 / 0.1 / 0.2 for T / S / M.
        norm_cfg (dict): Token norms. Defaults to ``dict(type='LN', eps=1e-6)``.
        stem_norm_cfg (dict): Stem (and resampler) norms. Defaults to ``dict(type='BN')``.
        ppe_init (str): Initialisation of Phi_p (Table 5, :func:`ppe_init_schedule`):

            - ``'peripheral'``: Eq. 9 with ``s_l`` over ``linspace(-5, 4)`` and ``v_l`` over
              ``linspace(3, 0.01)`` across the blocks;
            - ``'conv'``: the same with ``s_l = -5``, ``v_l = 3`` in every block;
            - ``'rand'``: every Phi_p parameter random (``w_r``, projections, both norms'
              weights and biases).

            Defaults to 'peripheral'.
        ppe_cfg (dict, optional): Extra arguments of every PeripheralPositionEncoding: the
            designs ``multi_layer``, ``kernel_size``, ``with_norms``, ``embedding``
            (``'euc'`` / ``'lrn'``, the ``Lrn`` table is laid out for 14 x 14 tokens) and
            ``chunk_elems``, ``with_cp``, ``max_cache``, ...
        with_phi_p (bool): Position-based attention Phi_p; False: MHSA (Table 1 (b), Table A3
            "absent"). Defaults to True.
        with_phi_c (bool): Content-based attention Phi_c; False: ``Normalize[Phi_p] V``
            (Table 1 (c)). Defaults to True.
        conv_stem (bool): The convolutional stem (C-stem); False: a ViT patchify stem, one
            16 x 16 stride-16 convolution (the image is zero-padded to a multiple of 16 on the
            right and bottom, as many tokens as the C-stem gives) (Table 1 (d)).
            Defaults to True.
        with_cpe (bool): The CPE of every block (Table 1 (e)). Defaults to True.
        freeze_phi_p (bool): Keep every Phi_p parameter (``w_r`` or the ``Lrn`` table, the
            projections and norms) at its initialisation: no gradients, and Phi_p is cached
            in training too (Table A3 "fixed"). Defaults to False.
        flop_match (bool): Widen the model until its FLOPs (:func:`pervit_flops` at 224 x 224)
            are the closest to those of the full PerViT of the same ``arch``: every width
            times one factor (multiples of ``num_heads``; the C-stem's last width follows
            ``embed_dims[0]``), as footnote 8 does for the models without Phi_c or C-stem.
            Defaults to False.
        with_cp (bool): Activation checkpointing per block in training: a block keeps only
            its input and is recomputed in backward (at 1333 x 800 the ``B x heads x N x N``
            attention probabilities of 12 blocks dominate the memory). Defaults to False.
        padding_exact (bool): With the image sizes of a padded batch given (``forward``'s
            ``img_shapes``, passed by mmposenc's detectors, or
            :func:`~mmposenc.models.padding_exact.backbone_image_shapes`), every image gets
            on its ``ceil(img / stride)`` cells of every output what it gets alone: the
            padded pixels / cells zeroed before every stem convolution (the zero padding of
            the image alone; the patchify stem's partial patch included), the
            padded tokens zeroed before every CPE, every MPA run on the image's own
            ``ceil(img / 16)`` token grid (Phi_p of that grid, no padded key: Phi_p depends
            on the whole grid; ``ceil(img / 2 ** len(stem_channels))`` for a custom C-stem),
            ``-inf`` at the padded cells before the resamplers' max-pooling, the padded
            cells of the outputs zeroed. Exact in eval mode (the stem's BatchNorm is then
            per cell; in training its batch statistics differ alone and batched anyway).
            Needs BatchNorm as ``stem_norm_cfg``.
            Defaults to False.
        init_cfg (dict | list[dict], optional): Defaults to truncated normal (std 0.02) for
            linear layers and 1/0 for LayerNorm, as in the official code.

    Examples:
        >>> model = PerViT(arch='tiny', out_indices=(0, 1, 2, 3))
        >>> [tuple(o.shape) for o in model(torch.rand(1, 3, 96, 128))]
        [(1, 192, 6, 8), (1, 224, 6, 8), (1, 280, 6, 8), (1, 280, 6, 8)]
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], {
            'embed_dims': [128, 192, 224, 280], 'depths': [2, 2, 6, 2], 'num_heads': 4,
            'stem_channels': [48, 64, 96, 128], 'drop_path_rate': 0.0}),
        **dict.fromkeys(['s', 'small'], {
            'embed_dims': [272, 320, 368, 464], 'depths': [2, 2, 6, 2], 'num_heads': 8,
            'stem_channels': [64, 128, 192, 272], 'drop_path_rate': 0.1}),
        **dict.fromkeys(['m', 'medium'], {
            'embed_dims': [312, 468, 540, 684], 'depths': [2, 2, 6, 2], 'num_heads': 12,
            'stem_channels': [64, 192, 256, 312], 'drop_path_rate': 0.2}),
    }
    essential_keys = {'embed_dims', 'depths', 'num_heads', 'stem_channels'}

    #: mmposenc's detectors and segmentors pass the image sizes of a padded batch as
    #: ``forward``'s ``img_shapes`` (:func:`~mmposenc.models.padding_exact.run_backbone`)
    takes_image_shapes = True

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = 3,
                 featmap_scales: Optional[Sequence[float]] = None,
                 mlp_ratio: float = 4.,
                 qkv_bias: bool = False,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: Optional[float] = None,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 stem_norm_cfg: dict = dict(type='BN'),
                 ppe_init: str = 'peripheral',
                 ppe_cfg: Optional[dict] = None,
                 with_phi_p: bool = True,
                 with_phi_c: bool = True,
                 conv_stem: bool = True,
                 with_cpe: bool = True,
                 freeze_phi_p: bool = False,
                 flop_match: bool = False,
                 with_cp: bool = False,
                 padding_exact: bool = False,
                 init_cfg: Optional[Union[dict, list]] = [
                     dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
                     dict(type='Constant', layer='LayerNorm', val=1., bias=0.)
                 ]):
        super().__init__(init_cfg=init_cfg)
        if padding_exact and stem_norm_cfg.get('type') not in _PER_CELL_NORMS:
            raise ValueError(f"PerViT: padding_exact=True does not cover stem_norm_cfg type="
                             f"{stem_norm_cfg.get('type')!r} (statistics over the padded map); "
                             "use BN or set padding_exact=False")
        self.padding_exact = padding_exact
        #: The steps taken in padding-exact mode (all of :data:`EXACT_STEPS`).
        self._exact_steps = EXACT_STEPS
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'Arch {arch} is not in default archs {set(self.arch_zoo)}')
            arch = self.arch_zoo[arch.lower()]
        elif not isinstance(arch, dict) or not self.essential_keys <= set(arch):
            raise ValueError(f'Custom arch needs a dict with keys {self.essential_keys}, '
                             f'got {arch!r}')
        lengths = {k: len(arch[k]) for k in ('embed_dims', 'depths')}
        if len(set(lengths.values())) != 1:
            raise ValueError(f'embed_dims and depths must have the same length, got {lengths}')
        if conv_stem and arch['stem_channels'][-1] != arch['embed_dims'][0]:
            raise ValueError('the last stem channel must equal embed_dims[0], got '
                             f"{arch['stem_channels'][-1]} and {arch['embed_dims'][0]}")
        if ppe_init not in PPE_INITS:
            raise ValueError(f'ppe_init must be one of {PPE_INITS}, got {ppe_init!r}')
        if not (with_phi_p or with_phi_c):
            raise ValueError('with_phi_p and with_phi_c cannot both be False')
        if freeze_phi_p and not with_phi_p:
            raise ValueError('freeze_phi_p needs with_phi_p=True')
        self.variant = dict(conv_stem=conv_stem, with_cpe=with_cpe, with_phi_c=with_phi_c)
        if flop_match:
            arch = self._flop_matched(arch, mlp_ratio, in_channels)
        self.arch_settings = dict(arch)
        self.in_channels = in_channels
        self.mlp_ratio = mlp_ratio
        self.with_phi_p = with_phi_p
        self.with_phi_c = with_phi_c
        self.conv_stem = conv_stem
        self.with_cpe = with_cpe
        self.freeze_phi_p = freeze_phi_p
        self.flop_match = flop_match
        self.ppe_init = ppe_init
        self.with_cp = with_cp
        self.embed_dims = list(arch['embed_dims'])
        self.depths = list(arch['depths'])
        self.num_heads = arch['num_heads']
        self.num_stages = len(self.depths)
        self.num_layers = sum(self.depths)
        if drop_path_rate is None:
            drop_path_rate = arch.get('drop_path_rate', 0.)

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        self.out_indices = []
        for i in out_indices:
            if not -self.num_stages <= i < self.num_stages:
                raise ValueError(f'out index {i} out of range for {self.num_stages} stages')
            self.out_indices.append(i % self.num_stages)
        if featmap_scales is not None and len(featmap_scales) != len(self.out_indices):
            raise ValueError(f'featmap_scales needs one scale per out index, got '
                             f'{len(featmap_scales)} for {len(self.out_indices)}')

        #: Pixels per token: ``2 ** len(stem_channels)`` (16 in the paper's archs) with the
        #: C-stem, 16 with the patchify stem.
        self.token_stride = 2**len(arch['stem_channels']) if conv_stem else 16
        if conv_stem:  # C-stem: 4 x (3x3 stride-2 conv + BN + ReLU), 1x1 conv
            stem, c_in = [], in_channels
            for c in arch['stem_channels']:
                stem.append(StemConv(c_in, c, stem_norm_cfg))
                c_in = c
            self.stem = Sequential(*stem)
            self.stem_proj = nn.Conv2d(c_in, c_in, 1)
        else:  # patchify stem of ViT / DeiT
            self.stem = nn.Conv2d(in_channels, self.embed_dims[0], 16, 16)
            self.stem_proj = nn.Identity()

        # per-block widths; the last block of a stage moves to the next stage's width
        widths = [d for d, n in zip(self.embed_dims, self.depths) for _ in range(n)]
        out_widths = widths[1:] + widths[-1:]
        self.stage_ends = [sum(self.depths[:i + 1]) - 1 for i in range(self.num_stages)]
        self.out_channels = [out_widths[e] for e in self.stage_ends]

        ppe_cfg = dict(ppe_cfg or {})
        if with_phi_p:  # one R (w_r, or the Lrn table) shared by all blocks and heads
            self.distance_embed = build_peripheral_embedding(
                ppe_cfg.get('embedding', 'euc'), 4 * self.num_heads, init=ppe_init,
                kernel_size=ppe_cfg.get('kernel_size', 3),
                multi_layer=ppe_cfg.get('multi_layer', True))
        else:
            self.distance_embed = None
        schedule = ppe_init_schedule(ppe_init, self.num_layers)
        dpr = torch.linspace(0, drop_path_rate, self.num_layers).tolist()
        self.blocks = ModuleList()
        for i in range(self.num_layers):
            cfg = dict(init=ppe_init, init_norm_bias=schedule[i][0],
                       init_norm_weight=schedule[i][1])
            cfg.update(ppe_cfg)
            self.blocks.append(
                PerViTBlock(widths[i], self.num_heads, out_dims=out_widths[i],
                            mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, drop_rate=drop_rate,
                            attn_drop_rate=attn_drop_rate, drop_path_rate=dpr[i],
                            norm_cfg=norm_cfg, distance_embed=self.distance_embed,
                            ppe_cfg=cfg, with_phi_p=with_phi_p, with_phi_c=with_phi_c,
                            with_cpe=with_cpe))
        if freeze_phi_p:
            for p in self.phi_p_parameters():
                p.requires_grad_(False)
        for i in self.out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg, self.out_channels[i])[1])
        self.featmap_scales = None if featmap_scales is None else tuple(featmap_scales)
        if featmap_scales is not None:
            self.resamplers = ModuleList([
                _build_resampler(s, self.out_channels[i], stem_norm_cfg)
                for s, i in zip(featmap_scales, self.out_indices)
            ])

    def _flop_matched(self, arch: dict, mlp_ratio: float, in_channels: int) -> dict:
        """``arch`` with every width times the factor (steps of 0.005 from 1) whose FLOPs
        are the closest to the full PerViT's (:func:`pervit_flops` at 224 x 224)."""
        heads = arch['num_heads']

        def flops(dims, stem, **variant):
            return pervit_flops(dims, arch['depths'], heads, stem, mlp_ratio=mlp_ratio,
                                in_channels=in_channels, **variant)

        target = flops(arch['embed_dims'], arch['stem_channels'])
        best = None
        for step in range(401):
            alpha = 1 + step / 200
            dims = [max(heads, round(d * alpha / heads) * heads) for d in arch['embed_dims']]
            stem = list(arch['stem_channels'][:-1]) + [dims[0]]
            gap = flops(dims, stem, **self.variant) - target
            if best is None or abs(gap) < best[0]:
                best = (abs(gap), dims, stem)
            if gap > 0:
                break
        return dict(arch, embed_dims=best[1], stem_channels=best[2])

    def flops(self, img_size: Sequence[int] = (224, 224), attention_matmul: bool = False) -> int:
        """:func:`pervit_flops` of this model (multiply-accumulates of one image)."""
        return pervit_flops(self.embed_dims, self.depths, self.num_heads,
                            self.arch_settings['stem_channels'], img_size,
                            mlp_ratio=self.mlp_ratio, in_channels=self.in_channels,
                            attention_matmul=attention_matmul, **self.variant)

    def phi_p_modules(self):
        """The shared ``R`` and every block's PeripheralPositionEncoding (empty without
        Phi_p)."""
        if self.distance_embed is None:
            return []
        return [self.distance_embed] + [b.attn.ppe for b in self.blocks]

    def phi_p_parameters(self):
        """Every Phi_p parameter once (``w_r`` / the ``Lrn`` table, projections, norms)."""
        return [p for m in self.phi_p_modules() for p in m.parameters()]

    def _stem(self, x: torch.Tensor, valid: Optional[List[Shape]]) -> torch.Tensor:
        """The stem; with ``valid`` (pixels per image) the padded cells zeroed before every
        convolution: ``ceil(img / 2 ** k)`` cells are the image's after ``k`` stride-2
        convolutions (the sizes of the image alone)."""
        steps = self._exact_steps if valid is not None else ()
        if not self.conv_stem:  # as many tokens as the C-stem: ceil(H / 16) x ceil(W / 16)
            if 'stem' in steps:  # the image alone pads its partial patch with zeros
                x = zero_padding(x, masks_from_valid_shapes(valid, x.shape[-2:], x.device))
            x = F.pad(x, (0, -x.shape[-1] % 16, 0, -x.shape[-2] % 16))
            return self.stem(x)
        for k, unit in enumerate(self.stem):
            if 'stem' in steps:
                cells = strided_shapes(valid, 2**k)
                x = zero_padding(x, masks_from_valid_shapes(cells, x.shape[-2:], x.device))
            x = unit(x)
        return self.stem_proj(x)

    def _resample(self, resampler: nn.Module, x: torch.Tensor,
                  mask: Optional[torch.Tensor]) -> torch.Tensor:
        """A resampler on a stride-16 map whose padded cells (``mask``) are zero: transposed
        convolutions give every cell from one input cell and the norm between them is per
        cell in eval mode, so only the max-pooling reads padded cells (``-inf`` there, as its
        ``ceil_mode`` border alone)."""
        if mask is not None and 'resample' in self._exact_steps and isinstance(
                resampler, nn.MaxPool2d):
            x = zero_padding(x, mask, float('-inf'))
        return resampler(x)

    def forward(self, x: torch.Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None):
        """Images ``(B, C_in, H, W)`` -> tuple of ``(B, C_i, H/16, W/16)`` maps (times the
        ``featmap_scales``), one per ``out_indices``.

        Args:
            x (Tensor): Images (B, C_in, H, W).
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image of a
                padded batch (top-left of ``x``), for the padding-exact mode. None: those
                bound by :func:`~mmposenc.models.padding_exact.backbone_image_shapes`, if any.
        """
        valid = bound_image_shapes(self, x, img_shapes) if self.padding_exact else None
        steps = self._exact_steps
        x = self._stem(x, valid)
        b, _, h, w = x.shape
        hw_shape = (h, w)
        tokens = mask = None  # the token grid each image owns, and its mask
        if valid is not None:
            t = self.token_stride
            tokens = strided_shapes(valid, t)
            mask = masks_from_valid_shapes(tokens, hw_shape, x.device)
        x = x.flatten(2).transpose(1, 2)
        feats = {}
        last = self.stage_ends[max(self.out_indices)]
        for i, blk in enumerate(self.blocks[:last + 1]):
            if self.with_cp and self.training and torch.is_grad_enabled():
                x = checkpoint(blk, x, hw_shape, tokens, steps, use_reentrant=False)
            else:
                x = blk(x, hw_shape, tokens, steps)
            if i in self.stage_ends:
                stage = self.stage_ends.index(i)
                if stage in self.out_indices:
                    y = getattr(self, f'norm{stage}')(x)
                    feats[stage] = y.transpose(1, 2).reshape(b, -1, h, w)
        outs = [feats[i] for i in self.out_indices]
        if self.featmap_scales is not None:
            outs = [self._resample(r, o, mask) for r, o in zip(self.resamplers, outs)]
        if valid is not None and 'outputs' in steps:  # ceil(img / stride) cells per image
            scales = self.featmap_scales or (1, ) * len(outs)
            outs = [zero_padding(o, masks_from_valid_shapes(
                [(_own_cells(ih, s, t), _own_cells(iw, s, t)) for ih, iw in valid],
                o.shape[-2:], o.device)) for o, s in zip(outs, scales)]
        return tuple(outs)

    def extra_repr(self) -> str:
        return (f'embed_dims={self.embed_dims}, depths={self.depths}, '
                f'num_heads={self.num_heads}, out_indices={self.out_indices}, '
                f'with_phi_p={self.with_phi_p}, with_phi_c={self.with_phi_c}, '
                f'conv_stem={self.conv_stem}, with_cpe={self.with_cpe}, '
                f'ppe_init={self.ppe_init!r}, freeze_phi_p={self.freeze_phi_p}, '
                f'flop_match={self.flop_match}, with_cp={self.with_cp}')
