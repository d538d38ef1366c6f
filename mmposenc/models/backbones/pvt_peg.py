"""PVT v1 with PEG instead of absolute position embeddings and GAP (Twins-PCPVT style)."""
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import build_dropout
from mmcv.cnn.bricks.transformer import FFN, PatchEmbed
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import trunc_normal_

from mmposenc.registry import MODELS
from ..layers.generators.peg import PEG, map_to_tokens, tokens_to_map
from ..padding_exact.binding import bound_image_shapes
from ..padding_exact.masks import (cells_after_stride, masks_from_valid_shapes, strided_shapes,
                                   valid_shapes_of_masks)
from ..padding_exact.ops import zero_padding
from ..padding_exact.switch import refuse_uncovered
from ..utils.pos_embed import resize_pos_embed

#: The masking steps of PVTPEG's padding-exact mode (each can be left out to show it is needed):
#: zero the padded cells before every patch embedding (``'patch_embed'``), before every PEG
#: (``'peg'``) and before the spatial-reduction convolution (``'sr_input'``); mask the keys
#: the image alone does not have (``'keys'``); zero the padded cells of the outputs
#: (``'outputs'``).
EXACT_STEPS = frozenset({'patch_embed', 'peg', 'sr_input', 'keys', 'outputs'})


def reduced_valid_cells(valid: torch.Tensor, sr_ratio: int) -> torch.Tensor:
    """Cells of the ``sr_ratio``-reduced key map that an image of ``valid`` cells has alone.

    The reduction is a ``sr_ratio`` x ``sr_ratio`` convolution of stride ``sr_ratio`` without
    padding, on the map zero-padded up to ``sr_ratio`` when smaller: the image alone has
    ``max(v, sr) // sr`` key cells per axis. Its last partial block (``v % sr`` cells) gives no
    key alone, so the batch's key cell that straddles the image border is masked; a map smaller
    than ``sr`` gives one key made of the image and zeros, which the batch reproduces with its
    padded cells zeroed.

    Examples:
        >>> reduced_valid_cells(torch.tensor([[107, 160], [5, 8]]), 8).tolist()
        [[13, 20], [1, 1]]
    """
    return torch.div(valid.clamp_min(sr_ratio), sr_ratio, rounding_mode='floor')


class SpatialReductionAttention(BaseModule):
    """PVT's spatial-reduction attention: keys/values from a map downsampled
    by a ``sr_ratio`` strided convolution.

    Parameter names (``q``, ``kv``, ``proj``, ``sr``, ``norm``) follow the
    official PVT/Twins code. A grid smaller than ``sr_ratio`` is zero-padded
    up to it so that any input size works.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Attention heads.
        sr_ratio (int): Spatial reduction of keys and values. Defaults to 1.
        qkv_bias (bool): Bias of ``q`` and ``kv``. Defaults to True.
        attn_drop (float): Attention-weight dropout. Defaults to 0.
        proj_drop (float): Output dropout. Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self, embed_dims, num_heads, sr_ratio=1, qkv_bias=True, attn_drop=0.,
                 proj_drop=0., init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_heads '
                             f'({num_heads})')
        self.num_heads = num_heads
        self.sr_ratio = sr_ratio
        self.q = nn.Linear(embed_dims, embed_dims, bias=qkv_bias)
        self.kv = nn.Linear(embed_dims, embed_dims * 2, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)
        if sr_ratio > 1:
            self.sr = nn.Conv2d(embed_dims, embed_dims, sr_ratio, sr_ratio)
            self.norm = nn.LayerNorm(embed_dims)

    def forward(self, x, hw_shape, padding_mask=None, steps=EXACT_STEPS):
        """(B, H*W, C) -> (B, H*W, C).

        Args:
            x (Tensor): Tokens (B, H*W, C).
            hw_shape (Sequence[int]): ``(H, W)``.
            padding_mask (Tensor, optional): Bool (B, H, W), True at the cells that are not
                the image's (top-left rectangles): the keys are then those of the image alone
                (:func:`reduced_valid_cells`). Defaults to None.
            steps (frozenset): The masking steps taken (see :data:`EXACT_STEPS`).
        """
        B, N, C = x.shape
        d = C // self.num_heads
        q = self.q(x).reshape(B, N, self.num_heads, d).transpose(1, 2)
        key_mask = padding_mask
        if self.sr_ratio > 1:
            feat = tokens_to_map(x, hw_shape)
            if 'sr_input' in steps:
                feat = zero_padding(feat, padding_mask)
            pad_b = max(self.sr_ratio - hw_shape[0], 0)
            pad_r = max(self.sr_ratio - hw_shape[1], 0)
            if pad_b or pad_r:
                feat = F.pad(feat, (0, pad_r, 0, pad_b))
            reduced = self.sr(feat)
            kv_in = self.norm(map_to_tokens(reduced))
            if padding_mask is not None:
                keys = reduced_valid_cells(valid_shapes_of_masks(padding_mask), self.sr_ratio)
                key_mask = masks_from_valid_shapes(keys.tolist(), reduced.shape[-2:], x.device)
        else:
            kv_in = x
        attn_mask = None
        if key_mask is not None and 'keys' in steps:
            attn_mask = ~key_mask.flatten(1)[:, None, None, :]
        k, v = self.kv(kv_in).reshape(B, -1, 2, self.num_heads, d).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class PVTEncoderLayer(BaseModule):
    """PVT v1 encoder layer: ``x + SRA(norm1(x))``, then ``x + FFN(norm2(x))``.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Attention heads.
        feedforward_channels (int): FFN hidden channels.
        sr_ratio (int): Spatial reduction ratio. Defaults to 1.
        qkv_bias (bool): Bias of q/kv. Defaults to True.
        drop_rate (float): Dropout. Defaults to 0.
        attn_drop_rate (float): Attention dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        norm_cfg (dict): Norms. Defaults to ``dict(type='LN', eps=1e-6)``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels, sr_ratio=1,
                 qkv_bias=True, drop_rate=0., attn_drop_rate=0., drop_path_rate=0.,
                 norm_cfg=dict(type='LN', eps=1e-6), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = SpatialReductionAttention(embed_dims, num_heads, sr_ratio, qkv_bias,
                                              attn_drop_rate, drop_rate)
        self.drop_path = build_dropout(dict(type='DropPath', drop_prob=drop_path_rate))
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(embed_dims=embed_dims, feedforward_channels=feedforward_channels,
                       num_fcs=2, ffn_drop=drop_rate, act_cfg=dict(type='GELU'),
                       dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate))

    def forward(self, x, hw_shape, padding_mask=None, steps=EXACT_STEPS):
        x = x + self.drop_path(self.attn(self.norm1(x), hw_shape, padding_mask, steps))
        return self.ffn(self.norm2(x), identity=x)


@MODELS.register_module()
class PVTPEG(BaseModule):
    """PVT v1 with PEG and GAP (the CPVT paper's PVT + PEG; Twins-PCPVT).

    `Pyramid Vision Transformer <https://arxiv.org/abs/2102.12122>`_ with its
    absolute position embeddings and class token removed and one
    :class:`PEG` after the first block of every stage, as in `Conditional
    Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_ ([L] §4.6, Table 13). Classification uses global
    average pooling of the last stage (a ``GlobalAveragePooling`` neck);
    detection and segmentation necks take the multi-scale maps of
    ``out_indices``. Any input size works.

    The other ImageNet rows of CPVT [L] Table 13 are settings of the same
    module (PVT-T top-1 in brackets):

    - PVT, the baseline (75.0): ``with_peg=False, with_pos_embed=True,
      out_type='cls_token'``;
    - PVT + PEG (77.3): ``with_peg=True, with_pos_embed=True,
      out_type='cls_token'``;
    - PVT + GAP (75.9): ``with_peg=False, with_pos_embed=True`` and a
      ``GlobalAveragePooling`` neck;
    - PVT + PEG + GAP (78.1): the defaults and a ``GlobalAveragePooling`` neck.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'medium'``, ``'large'``
            (aliases ``'t'``, ``'s'``, ``'m'``, ``'l'``) or a dict with keys
            ``embed_dims``, ``num_heads``, ``mlp_ratios``, ``depths``,
            ``sr_ratios`` (one entry per stage). Defaults to ``'tiny'``.
        in_channels (int): Input channels. Defaults to 3.
        patch_size (int): Patch size of the first stage. Defaults to 4.
        peg_cfg (dict): Extra :class:`PEG` arguments. Defaults to ``dict()``.
        with_peg (bool): One PEG after the first block of every stage.
            Defaults to True.
        with_pos_embed (bool): PVT v1's learnable absolute position embedding
            of every stage (one vector per token of the ``img_size`` grid, the
            class token's included, truncated-normal std 0.02, dropout
            ``drop_rate``), resized bilinearly to other grids as PVT v1 does.
            Defaults to False.
        img_size (int | tuple): Size the position embeddings are made for.
            Defaults to 224.
        out_type (str): ``'featmap'``: (B, C_i, H_i, W_i) maps of the
            ``out_indices`` stages (GAP is a ``GlobalAveragePooling`` neck).
            ``'cls_token'``: PVT v1's classification head input, a class token
            joined to the last stage's tokens (before its position
            embedding) and returned, final-normalised, as (B, C); needs
            ``out_indices`` = the last stage only. Defaults to ``'featmap'``.
        out_indices (Sequence[int]): Stages whose maps are returned.
            Defaults to ``(3,)``.
        qkv_bias (bool): Bias of q/kv. Defaults to True.
        drop_rate (float): Dropout. Defaults to 0.
        attn_drop_rate (float): Attention dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth, increasing linearly over all
            blocks. Defaults to 0.1.
        norm_cfg (dict): Block norms. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        final_norm (bool): Normalise the last stage's output (as the
            classifier). Defaults to True.
        padding_exact (bool): With the image sizes of a padded batch given
            (``forward``'s ``img_shapes``, passed by mmposenc's detectors, or
            :func:`~mmposenc.models.padding_exact.backbone_image_shapes`), every image gets on its
            ``ceil(img / stride)`` cells the maps it gets alone (zero elsewhere):
            the padded cells are zeroed before every patch embedding, PEG and
            spatial-reduction convolution (the zero padding the image alone
            reads), and the keys the image alone does not have are masked in
            the attention (the padding, and the reduced cell straddling its
            border: :func:`reduced_valid_cells`); LayerNorm, the FFN and the
            queries are per token. Same parameters either way. Needs
            ``with_pos_embed=False`` (a position embedding resized to the batch
            grid differs from the image's), ``out_type='featmap'`` and PEGs with
            one zero-padded stride-1 convolution. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> model = PVTPEG('tiny', out_indices=(0, 1, 2, 3))
        >>> for out in model(torch.rand(1, 3, 96, 128)):
        ...     print(out.shape)
        torch.Size([1, 64, 24, 32])
        torch.Size([1, 128, 12, 16])
        torch.Size([1, 320, 6, 8])
        torch.Size([1, 512, 3, 4])
    """
    _base = dict(embed_dims=[64, 128, 320, 512], num_heads=[1, 2, 5, 8],
                 mlp_ratios=[8, 8, 4, 4], sr_ratios=[8, 4, 2, 1])
    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(_base, depths=[2, 2, 2, 2])),
        **dict.fromkeys(['s', 'small'], dict(_base, depths=[3, 4, 6, 3])),
        **dict.fromkeys(['m', 'medium'], dict(_base, depths=[3, 4, 18, 3])),
        **dict.fromkeys(['l', 'large'], dict(_base, depths=[3, 8, 27, 3])),
    }
    essential_keys = {'embed_dims', 'num_heads', 'mlp_ratios', 'depths', 'sr_ratios'}

    OUT_TYPES = ('featmap', 'cls_token')

    #: mmposenc's detectors and segmentors pass the image sizes of a padded batch as
    #: ``forward``'s ``img_shapes`` (:func:`~mmposenc.models.padding_exact.run_backbone`)
    takes_image_shapes = True

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 patch_size: int = 4,
                 peg_cfg: dict = dict(),
                 with_peg: bool = True,
                 with_pos_embed: bool = False,
                 img_size: Union[int, Sequence[int]] = 224,
                 out_type: str = 'featmap',
                 out_indices: Sequence[int] = (3,),
                 qkv_bias: bool = True,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 final_norm: bool = True,
                 padding_exact: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if padding_exact:
            refuse_uncovered('PVTPEG', peg_cfg, (
                ('with_pos_embed=True', with_pos_embed),
                (f'out_type={out_type!r}', out_type != 'featmap')))
        self.padding_exact = padding_exact
        #: The masking steps taken in padding-exact mode (all of :data:`EXACT_STEPS`).
        self._exact_steps = EXACT_STEPS
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'Arch {arch} is not in default archs {set(self.arch_zoo)}')
            arch = self.arch_zoo[arch.lower()]
        elif not isinstance(arch, dict) or not self.essential_keys <= set(arch):
            raise ValueError(f'Custom arch needs a dict with keys {self.essential_keys}')
        lengths = {k: len(arch[k]) for k in self.essential_keys}
        if len(set(lengths.values())) != 1:
            raise ValueError(f'All per-stage lists of arch must have the same length, '
                             f'got {lengths}')
        self.arch_settings = arch
        self.embed_dims = list(arch['embed_dims'])
        self.depths = list(arch['depths'])
        self.num_stages = len(self.depths)
        if isinstance(out_indices, int):
            out_indices = (out_indices,)
        out_indices = tuple(self.num_stages + i if i < 0 else i for i in out_indices)
        for i in out_indices:
            if not 0 <= i < self.num_stages:
                raise ValueError(f'out_indices must be in [0, {self.num_stages}), got {i}')
        self.out_indices = out_indices
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'out_type must be one of {self.OUT_TYPES}, got {out_type!r}')
        if out_type == 'cls_token':
            if out_indices != (self.num_stages - 1, ):
                raise ValueError("out_type='cls_token' returns the class token of the last "
                                 f'stage: out_indices must be ({self.num_stages - 1}, ), got '
                                 f'{out_indices}')
            if arch['sr_ratios'][-1] != 1:
                raise ValueError("out_type='cls_token' needs sr_ratio 1 in the last stage "
                                 f"(the class token has no place on the reduced map), got "
                                 f"{arch['sr_ratios'][-1]}")
        self.out_type = out_type
        self.with_cls_token = out_type == 'cls_token'
        self.with_peg = with_peg
        self.with_pos_embed = with_pos_embed
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        grid = [cells_after_stride(s, patch_size) for s in img_size]
        #: The grid each stage's position embedding is made for (img_size / 4, 8, 16, 32).
        self.pos_embed_shapes = []
        for i in range(self.num_stages):
            if i:
                grid = [cells_after_stride(g, 2) for g in grid]
            self.pos_embed_shapes.append(tuple(grid))
        if with_pos_embed:
            #: PVT v1's absolute position embeddings, one per stage (the last one with the
            #: class token's entry first when ``out_type='cls_token'``).
            self.pos_embeds = nn.ParameterList([
                nn.Parameter(torch.zeros(
                    1, h * w + int(self.with_cls_token and i == self.num_stages - 1), dims))
                for i, ((h, w), dims) in enumerate(zip(self.pos_embed_shapes,
                                                       self.embed_dims))])
            self._register_load_state_dict_pre_hook(self._drop_cls_pos_embed_hook)
        if self.with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims[-1]))
        self.drop_after_pos = nn.Dropout(p=drop_rate)

        dpr = np.linspace(0, drop_path_rate, sum(self.depths))
        self.patch_embeds = ModuleList()
        self.stages = ModuleList()
        #: One PEG per stage (stable name for ``custom_keys``), none without ``with_peg``.
        self.pegs = ModuleList()
        cur = 0
        prev = in_channels
        for i, (dims, depth) in enumerate(zip(self.embed_dims, self.depths)):
            k = patch_size if i == 0 else 2
            self.patch_embeds.append(PatchEmbed(
                in_channels=prev, embed_dims=dims, kernel_size=k, stride=k,
                padding='corner', norm_cfg=dict(type='LN')))
            self.stages.append(ModuleList([
                PVTEncoderLayer(dims, arch['num_heads'][i],
                                int(dims * arch['mlp_ratios'][i]), arch['sr_ratios'][i],
                                qkv_bias, drop_rate, attn_drop_rate, float(dpr[cur + j]),
                                norm_cfg) for j in range(depth)
            ]))
            if with_peg:
                last = i == self.num_stages - 1
                self.pegs.append(PEG(dims, num_extra_tokens=int(self.with_cls_token and last),
                                     **peg_cfg))
            cur += depth
            prev = dims
        self.final_norm = final_norm
        if final_norm:
            self.norm = build_norm_layer(norm_cfg, self.embed_dims[-1])[1]

    def init_weights(self):
        super().init_weights()
        if self.init_cfg is not None:
            return
        if self.with_pos_embed:
            for pos_embed in self.pos_embeds:
                trunc_normal_(pos_embed, std=.02)
        if self.with_cls_token:
            trunc_normal_(self.cls_token, std=.02)
        for name, m in self.named_modules():
            if name.startswith('pegs'):
                continue  # PEG.init_weights keeps the official conv init
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _drop_cls_pos_embed_hook(self, state_dict, prefix, *args, **kwargs):
        """Load a class-token classifier's last position embedding (one entry longer) into a
        model without class token (dense tasks): its class-token entry is dropped."""
        name = f'{prefix}pos_embeds.{self.num_stages - 1}'
        if name in state_dict and not self.with_cls_token:
            h, w = self.pos_embed_shapes[-1]
            if state_dict[name].shape[1] == h * w + 1:
                state_dict[name] = state_dict[name][:, 1:]

    def forward(self, x: torch.Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None):
        """Args:
            x (Tensor): Images (B, in_channels, H, W), any H and W.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image of a
                padded batch (top-left of ``x``), for the padding-exact mode. None: those
                bound by :func:`~mmposenc.models.padding_exact.backbone_image_shapes`, if any.

        Returns:
            tuple[Tensor]: (B, C_i, H_i, W_i) maps of the ``out_indices``
            stages (strides 4, 8, 16, 32 for the default patch size); the
            final-normalised class token (B, C) for ``out_type='cls_token'``.
            In padding-exact mode with image sizes given, each image's maps on
            its cells are those of the image alone, zero elsewhere.
        """
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects images of shape (B, C, H, W), '
                             f'got {tuple(x.shape)}')
        valid = bound_image_shapes(self, x, img_shapes) if self.padding_exact else None
        steps = self._exact_steps
        mask = None
        outs = []
        for i in range(self.num_stages):
            if valid is not None:
                if 'patch_embed' in steps:  # the image alone reads zeros in a partial patch
                    x = zero_padding(x, masks_from_valid_shapes(valid, x.shape[-2:], x.device))
                k = self.patch_embeds[i].projection.stride
                valid = strided_shapes(valid, tuple(k))  # 'corner' padding
            x, hw_shape = self.patch_embeds[i](x)
            if valid is not None:
                mask = masks_from_valid_shapes(valid, hw_shape, x.device)
            last = i == self.num_stages - 1
            extra = int(self.with_cls_token and last)
            if extra:
                x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            if self.with_pos_embed:
                x = x + resize_pos_embed(self.pos_embeds[i], self.pos_embed_shapes[i],
                                         hw_shape, 'bilinear', extra)
            x = self.drop_after_pos(x)
            for j, block in enumerate(self.stages[i]):
                x = block(x, hw_shape, mask, steps)
                if j == 0 and self.with_peg:
                    if mask is not None and 'peg' in steps:  # its zero padding
                        x = x.masked_fill(mask.flatten(1)[..., None], 0)
                    x = self.pegs[i](x, hw_shape)
                    hw_shape = self.pegs[i].out_shape(hw_shape)  # padding='none' shrinks it
            if last and self.final_norm:
                x = self.norm(x)
            if extra:
                outs.append(x[:, 0])
                break
            x = tokens_to_map(x, hw_shape).contiguous()
            if i in self.out_indices:
                outs.append(zero_padding(x, mask) if 'outputs' in steps else x)
        return tuple(outs)
