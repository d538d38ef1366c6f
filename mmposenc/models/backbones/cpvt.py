"""CPVT: DeiT/ViT whose learnable position embedding is replaced by PEGs."""
import math
from typing import Optional, Sequence, Tuple, Union

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
from ..padding_exact.binding import bound_image_shapes
from ..padding_exact.masks import cells_after_stride, masks_from_valid_shapes, strided_shapes
from ..padding_exact.ops import zero_padding
from ..padding_exact.switch import refuse_uncovered
from ..layers.generators.peg import PEG
from ..utils.pos_embed import resize_pos_embed  # noqa: F401  (importable from here too)

#: The masking steps of CPVT's padding-exact mode (each can be left out to show it is needed):
#: zero the padded pixels before the patch embedding (``'patch_embed'``) and the padded tokens
#: before every PEG (``'peg'``); mask the padded tokens as keys (``'keys'``); zero the padded
#: cells of the output maps (``'outputs'``).
EXACT_STEPS = frozenset({'patch_embed', 'peg', 'keys', 'outputs'})


class MultiheadSelfAttention(BaseModule):
    """Multi-head self-attention with a fused ``qkv`` projection (ViT/DeiT).

    Parameter names (``qkv``, ``proj``) follow mmpretrain's ViT so its
    checkpoints map one to one.

    Args:
        embed_dims (int): Channels.
        num_heads (int): Attention heads.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        attn_drop (float): Dropout on attention weights. Defaults to 0.
        proj_drop (float): Dropout after the output projection. Defaults to 0.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self, embed_dims, num_heads, qkv_bias=True, attn_drop=0., proj_drop=0.,
                 init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_heads '
                             f'({num_heads})')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, qk_input=None, key_padding_mask=None):
        """(B, N, C) -> (B, N, C).

        ``qk_input`` (B, N, C), when given, feeds the query and key projections while ``x``
        feeds the values (the "PEG on Q and K only" ablation of CPVT [L] §5.1).
        ``key_padding_mask`` (bool (B, N), True = padded), when given, keeps the padded tokens
        out of every query's keys.
        """
        B, N, C = x.shape
        if qk_input is None:
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
        else:
            if qk_input.shape != x.shape:
                raise ValueError(f'qk_input of shape {tuple(qk_input.shape)} must match the '
                                 f'tokens {tuple(x.shape)}')
            w, b = self.qkv.weight, self.qkv.bias
            qk = F.linear(qk_input, w[:2 * C], None if b is None else b[:2 * C])
            q, k = qk.reshape(B, N, 2, self.num_heads, C // self.num_heads).permute(
                2, 0, 3, 1, 4)
            v = F.linear(x, w[2 * C:], None if b is None else b[2 * C:])
            v = v.reshape(B, N, self.num_heads, C // self.num_heads).transpose(1, 2)
        attn_mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
        x = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.attn_drop if self.training else 0.)
        x = x.transpose(1, 2).reshape(B, N, C)
        return self.proj_drop(self.proj(x))


class TransformerEncoderLayer(BaseModule):
    """Pre-norm ViT encoder layer (``ln1, attn, ln2, ffn``, as mmpretrain).

    Args:
        embed_dims (int): Channels.
        num_heads (int): Attention heads.
        feedforward_channels (int): Hidden channels of the FFN.
        drop_rate (float): Dropout after attention and FFN. Defaults to 0.
        attn_drop_rate (float): Attention-weight dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        act_cfg (dict): FFN activation. Defaults to ``dict(type='GELU')``.
        norm_cfg (dict): Norm layers. Defaults to ``dict(type='LN')``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self, embed_dims, num_heads, feedforward_channels, drop_rate=0.,
                 attn_drop_rate=0., drop_path_rate=0., qkv_bias=True,
                 act_cfg=dict(type='GELU'), norm_cfg=dict(type='LN'), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.ln1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = MultiheadSelfAttention(embed_dims, num_heads, qkv_bias=qkv_bias,
                                           attn_drop=attn_drop_rate, proj_drop=drop_rate)
        self.drop_path = build_dropout(dict(type='DropPath', drop_prob=drop_path_rate))
        self.ln2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(embed_dims=embed_dims, feedforward_channels=feedforward_channels,
                       num_fcs=2, ffn_drop=drop_rate,
                       dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate),
                       act_cfg=act_cfg)

    def init_weights(self):
        super().init_weights()
        if self.init_cfg is None:
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    trunc_normal_(m.weight, std=.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

    def forward(self, x, qk_input=None, key_padding_mask=None):
        """``qk_input``: tokens for the queries and keys only (see
        :meth:`MultiheadSelfAttention.forward`); the values and the residual use ``x``.
        ``key_padding_mask``: bool (B, N), True at tokens no query attends to."""
        qk = None if qk_input is None else self.ln1(qk_input)
        x = x + self.drop_path(self.attn(self.ln1(x), qk, key_padding_mask))
        return self.ffn(self.ln2(x), identity=x)


def _to_2tuple(x) -> Tuple[int, int]:
    return (x, x) if isinstance(x, int) else tuple(x)


@MODELS.register_module()
class CPVT(BaseModule):
    """Conditional Position encoding Vision Transformer of `Conditional
    Positional Encodings for Vision Transformers
    <https://arxiv.org/abs/2102.10882>`_.

    DeiT with its learnable absolute position embedding removed and a
    :class:`PEG` inserted after every encoder layer listed in
    ``peg_positions``. Since the position encoding is generated from the
    tokens, the model runs at any input resolution without interpolation.

    Args:
        arch (str | dict): ``'tiny'`` (192 dims / 3 heads / 12 layers),
            ``'small'`` (384/6/12) or ``'base'`` (768/12/12), aliases
            ``'t'``, ``'s'``, ``'b'``; or a dict with keys ``embed_dims``,
            ``num_layers``, ``num_heads``, ``feedforward_channels``.
            Defaults to ``'tiny'``.
        img_size (int | tuple): Nominal input size; only used to size the
            optional learnable position embedding. Defaults to 224.
        patch_size (int): Patch size. Defaults to 16.
        in_channels (int): Input channels. Defaults to 3.
        peg_positions (Sequence[int]): Indices of the encoder layers followed
            by a PEG; ``-1`` puts one before the first layer. The paper's
            default is ``(0,)`` (after the first layer); its best "0-5" is
            ``(0, 1, 2, 3, 4)``. Defaults to ``(0,)``.
        peg_cfg (dict): Extra arguments of every :class:`PEG` (e.g.
            ``kernel_size``, ``conv_type``, ``padding``). With
            ``padding='none'`` every PEG shrinks the token grid (CPVT [E]
            Table 10: 196 -> 144 tokens) and the later layers work on the
            smaller grid. Defaults to ``dict()``.
        peg_on (str): What the PEG output feeds:

            - ``'qkv'``: it replaces the tokens (``X + F(X)``), so it reaches
              the queries, keys and values of every later layer (the paper's
              PEG, default);
            - ``'qk'``: the ablation of CPVT [L] §5.1 ("only adding it when
              calculating Q and K in the attention layer", 71.3%): the layer
              after the PEG computes its queries and keys from ``X + F(X)``
              and its values and residual from ``X``; the tokens themselves
              never receive ``F(X)``.

            Defaults to ``'qkv'``.
        out_type (str): Output of each index in ``out_indices``:

            - ``'cls_token'``: the class token, (B, C).
            - ``'avg_featmap'``: CPVT-GAP, the average of the (normalised)
              patch tokens, (B, C); the model has no class token at all.
            - ``'featmap'``: the patch tokens as a map (B, C, H, W) for dense
              tasks.

            Defaults to ``'cls_token'``.
        with_cls_token (bool, optional): Whether a class token is used.
            Defaults to None: only for ``out_type='cls_token'``.
        out_indices (int | Sequence[int]): Encoder layers whose outputs are
            returned. Defaults to -1 (the last).
        with_pos_embed (bool): Keep DeiT's learnable absolute position
            embedding as well ("PEG + LE", CPVT [L] Table 7); it is resized
            bicubically to the input grid. Defaults to False.
        interpolate_mode (str): Resize mode of the kept position embedding.
            Defaults to ``'bicubic'``.
        drop_rate (float): Dropout. Defaults to 0.
        attn_drop_rate (float): Attention dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth, linearly increasing.
            Defaults to 0.
        qkv_bias (bool): Bias of the qkv projections. Defaults to True.
        norm_cfg (dict): Norm layers. Defaults to
            ``dict(type='LN', eps=1e-6)``.
        final_norm (bool): Normalise the last layer's output. Defaults to True.
        padding_exact (bool): With the image sizes of a padded batch given
            (``forward``'s ``img_shapes``, passed by mmposenc's detectors, or
            :func:`~mmposenc.models.padding_exact.backbone_image_shapes`),
            every image gets on its ``ceil(img / patch_size)`` cells (and in its
            class token / average) what it gets alone: padded pixels zeroed
            before the patch embedding (the image alone pads its partial patch
            with zeros), padded tokens zeroed before every PEG and masked as keys
            in every attention, the average over the image's tokens only, the
            padded cells of the maps zeroed. Needs ``with_pos_embed=False``,
            ``peg_on='qkv'`` and PEGs with one zero-padded stride-1 convolution.
            Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> model = CPVT('tiny')
        >>> model(torch.rand(1, 3, 224, 224))[0].shape
        torch.Size([1, 192])
        >>> model = CPVT('tiny', out_type='featmap', peg_positions=(0, 1, 2, 3, 4))
        >>> model(torch.rand(1, 3, 160, 96))[0].shape
        torch.Size([1, 192, 10, 6])
    """
    arch_zoo = {
        **dict.fromkeys(['t', 'tiny', 'deit-t', 'deit-tiny'], {
            'embed_dims': 192, 'num_layers': 12, 'num_heads': 3,
            'feedforward_channels': 192 * 4}),
        **dict.fromkeys(['s', 'small', 'deit-s', 'deit-small'], {
            'embed_dims': 384, 'num_layers': 12, 'num_heads': 6,
            'feedforward_channels': 384 * 4}),
        **dict.fromkeys(['b', 'base', 'deit-b', 'deit-base'], {
            'embed_dims': 768, 'num_layers': 12, 'num_heads': 12,
            'feedforward_channels': 768 * 4}),
    }
    essential_keys = {'embed_dims', 'num_layers', 'num_heads', 'feedforward_channels'}
    OUT_TYPES = ('cls_token', 'avg_featmap', 'featmap')

    #: mmposenc's detectors and segmentors pass the image sizes of a padded batch as
    #: ``forward``'s ``img_shapes`` (:func:`~mmposenc.models.padding_exact.run_backbone`)
    takes_image_shapes = True

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 peg_positions: Sequence[int] = (0,),
                 peg_cfg: dict = dict(),
                 peg_on: str = 'qkv',
                 out_type: str = 'cls_token',
                 with_cls_token: Optional[bool] = None,
                 out_indices: Union[int, Sequence[int]] = -1,
                 with_pos_embed: bool = False,
                 interpolate_mode: str = 'bicubic',
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 final_norm: bool = True,
                 padding_exact: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if padding_exact:
            refuse_uncovered('CPVT', peg_cfg, (
                ('with_pos_embed=True', with_pos_embed),
                (f'peg_on={peg_on!r}', peg_on != 'qkv')))
        self.padding_exact = padding_exact
        #: The masking steps taken in padding-exact mode (all of :data:`EXACT_STEPS`).
        self._exact_steps = EXACT_STEPS
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'Arch {arch} is not in default archs {set(self.arch_zoo)}')
            self.arch_settings = self.arch_zoo[arch.lower()]
        else:
            if not isinstance(arch, dict) or not self.essential_keys <= set(arch):
                raise ValueError(f'Custom arch needs a dict with keys {self.essential_keys}')
            self.arch_settings = arch
        self.embed_dims = self.arch_settings['embed_dims']
        self.num_layers = self.arch_settings['num_layers']

        if out_type not in self.OUT_TYPES:
            raise ValueError(f'out_type must be one of {self.OUT_TYPES}, got {out_type!r}')
        self.out_type = out_type
        if with_cls_token is None:
            with_cls_token = out_type == 'cls_token'
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError("out_type='cls_token' needs with_cls_token=True")
        self.with_cls_token = with_cls_token
        self.num_extra_tokens = int(with_cls_token)

        # no adaptive padding in PatchEmbed: forward() zero-pads the bottom/right itself (see
        # _pad_to_patches), which gives mmcv's 'corner' padding result with a fixed pad size
        self.patch_size = patch_size
        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=self.embed_dims, conv_type='Conv2d',
            kernel_size=patch_size, stride=patch_size, padding=0)
        self.patch_resolution = tuple(
            cells_after_stride(s, patch_size) for s in _to_2tuple(img_size))
        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        self.with_pos_embed = with_pos_embed
        self.interpolate_mode = interpolate_mode
        if with_pos_embed:
            num_patches = self.patch_resolution[0] * self.patch_resolution[1]
            self.pos_embed = nn.Parameter(
                torch.zeros(1, num_patches + self.num_extra_tokens, self.embed_dims))
            self._register_load_state_dict_pre_hook(self._resize_pos_embed_hook)
        self.drop_after_pos = nn.Dropout(p=drop_rate)

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        out_indices = [self.num_layers + i if i < 0 else i for i in out_indices]
        for i in out_indices:
            if not 0 <= i < self.num_layers:
                raise ValueError(f'out_indices must be in [0, {self.num_layers}), got {i}')
        self.out_indices = tuple(out_indices)

        peg_positions = tuple(sorted(set(peg_positions)))
        for p in peg_positions:
            if not -1 <= p < self.num_layers:
                raise ValueError(f'peg_positions must be in [-1, {self.num_layers - 1}], '
                                 f'got {p}')
        self.peg_positions = peg_positions
        #: PEGs, one per entry of ``peg_positions`` (stable name for ``custom_keys``).
        self.pegs = ModuleList([
            PEG(self.embed_dims, num_extra_tokens=self.num_extra_tokens, **peg_cfg)
            for _ in peg_positions
        ])
        if peg_on not in ('qkv', 'qk'):
            raise ValueError(f"peg_on must be 'qkv' or 'qk', got {peg_on!r}")
        if peg_on == 'qk':
            if any(peg.out_shape((16, 16)) != (16, 16) or not peg.residual
                   for peg in self.pegs):
                raise ValueError("peg_on='qk' needs PEGs that keep the grid and add X "
                                 "(padding='zeros', stride=1, residual=True)")
            if self.num_layers - 1 in peg_positions:
                raise ValueError("peg_on='qk' feeds the layer after each PEG; the last layer "
                                 f'({self.num_layers - 1}) has none')
        self.peg_on = peg_on

        dpr = np.linspace(0, drop_path_rate, self.num_layers)
        self.layers = ModuleList([
            TransformerEncoderLayer(
                self.embed_dims, self.arch_settings['num_heads'],
                self.arch_settings['feedforward_channels'], drop_rate=drop_rate,
                attn_drop_rate=attn_drop_rate, drop_path_rate=float(dpr[i]),
                qkv_bias=qkv_bias, norm_cfg=norm_cfg) for i in range(self.num_layers)
        ])
        self.final_norm = final_norm
        if final_norm:
            self.ln1 = build_norm_layer(norm_cfg, self.embed_dims)[1]

    def init_weights(self):
        super().init_weights()
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            return
        if self.with_cls_token:
            trunc_normal_(self.cls_token, std=.02)
        if self.with_pos_embed:
            trunc_normal_(self.pos_embed, std=.02)

    def _resize_pos_embed_hook(self, state_dict, prefix, *args, **kwargs):
        """Resize a checkpoint's position embedding (e.g. DeiT at another size)."""
        name = prefix + 'pos_embed'
        if name not in state_dict:
            return
        ckpt = state_dict[name]
        if ckpt.shape[1] == self.pos_embed.shape[1] + 1 and not self.with_cls_token:
            ckpt = ckpt[:, 1:]  # drop the cls position of a DeiT checkpoint
        if ckpt.shape != self.pos_embed.shape:
            side = int(math.isqrt(ckpt.shape[1] - self.num_extra_tokens))
            ckpt = resize_pos_embed(ckpt, (side, side), self.patch_resolution,
                                    self.interpolate_mode, self.num_extra_tokens)
        state_dict[name] = ckpt

    def _format_output(self, x, hw_shape, mask=None):
        if self.out_type == 'cls_token':
            return x[:, 0]
        patch_tokens = x[:, self.num_extra_tokens:]
        if self.out_type == 'avg_featmap':
            if mask is None:
                return patch_tokens.mean(dim=1)
            valid = (~mask).flatten(1)[..., None].to(x.dtype)  # the image's tokens only
            return (patch_tokens * valid).sum(1) / valid.sum(1)
        B, _, C = patch_tokens.shape
        out = patch_tokens.reshape(B, *hw_shape, C).permute(0, 3, 1, 2).contiguous()
        return zero_padding(out, mask) if 'outputs' in self._exact_steps else out

    def _pad_to_patches(self, x: torch.Tensor) -> torch.Tensor:
        """Zero-pad the bottom/right so that the stride-p patch convolution yields
        ceil(H/p) x ceil(W/p) patches (a partial last patch sees zeros).

        Padding by the fixed amount p - 1 gives exactly ceil(H/p) windows, with the same values
        as padding to the next multiple of p, and keeps H and W dynamic in a traced / ONNX
        graph; in eager mode nothing is padded when H and W are multiples of p.
        """
        p = self.patch_size
        if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export() or \
                x.shape[-2] % p or x.shape[-1] % p:
            x = F.pad(x, (0, p - 1, 0, p - 1))
        return x

    def forward(self, x: torch.Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None
                ) -> Tuple[torch.Tensor, ...]:
        """Args:
            x (Tensor): Images (B, in_channels, H, W), any H and W.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image of a
                padded batch (top-left of ``x``), for the padding-exact mode. None: those
                bound by :func:`~mmposenc.models.padding_exact.backbone_image_shapes`, if any.

        Returns:
            tuple[Tensor]: One output per ``out_indices``: (B, C) for
            ``'cls_token'``/``'avg_featmap'``, (B, C, H/p, W/p) for
            ``'featmap'``.
        """
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects images of shape (B, C, H, W), '
                             f'got {tuple(x.shape)}')
        B = x.shape[0]
        valid = bound_image_shapes(self, x, img_shapes) if self.padding_exact else None
        steps = self._exact_steps
        mask = key_mask = None
        if valid is not None and 'patch_embed' in steps:
            x = zero_padding(x, masks_from_valid_shapes(valid, x.shape[-2:], x.device))
        x, hw_shape = self.patch_embed(self._pad_to_patches(x))
        if valid is not None:
            mask = masks_from_valid_shapes(strided_shapes(valid, self.patch_size), hw_shape,
                                           x.device)
            if 'keys' in steps:  # the extra tokens are keys of the image alone
                key_mask = F.pad(mask.flatten(1), (self.num_extra_tokens, 0), value=False)
        if self.with_cls_token:
            x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)
        if self.with_pos_embed:
            x = x + resize_pos_embed(self.pos_embed, self.patch_resolution, hw_shape,
                                     self.interpolate_mode, self.num_extra_tokens)
        x = self.drop_after_pos(x)
        pegs = dict(zip(self.peg_positions, self.pegs))
        qk_input = None  # peg_on='qk': X + F(X) for the next layer's queries and keys only
        outs = []
        for i in [-1] + list(range(self.num_layers)):
            if i >= 0:
                x = self.layers[i](x, qk_input, key_mask)
                qk_input = None
            if i in pegs:
                if mask is not None and 'peg' in steps:  # its zero padding
                    e = self.num_extra_tokens
                    x = torch.cat((x[:, :e], x[:, e:].masked_fill(mask.flatten(1)[..., None],
                                                                  0)), 1)
                if self.peg_on == 'qk':
                    qk_input = pegs[i](x, hw_shape)
                else:
                    x = pegs[i](x, hw_shape)
                    hw_shape = pegs[i].out_shape(hw_shape)  # padding='none' shrinks it
            if i < 0:
                continue
            if i == self.num_layers - 1 and self.final_norm:
                x = self.ln1(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw_shape, mask))
        return tuple(outs)
