"""A plain ViT whose position encoding is a config field."""
import inspect
from typing import Optional, Sequence, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import build_dropout
from mmcv.cnn.bricks.transformer import FFN, PatchEmbed
from mmengine.model import BaseModule, ModuleList

from mmposenc.registry import MODELS
from ..layers.attention.pe_attention import PEMultiheadAttention
from ..layers.encodings.base import BasePositionEncoding


class PETransformerEncoderLayer(BaseModule):
    """Pre-norm encoder layer whose attention consults position encodings.

    Args:
        embed_dims (int): Token channels.
        num_heads (int): Attention heads.
        feedforward_channels (int): Hidden channels of the FFN.
        drop_rate (float): Dropout after the attention projection and in the FFN.
            Defaults to 0.
        attn_drop_rate (float): Dropout on the attention weights. Defaults to 0.
        drop_path_rate (float): Stochastic depth of both residual branches.
            Defaults to 0.
        qkv_bias (bool): Bias of the qkv projection. Defaults to True.
        norm_cfg (dict): Norm layers. Defaults to ``dict(type='LN', eps=1e-6)``.
        act_cfg (dict): FFN activation. Defaults to ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialization config. Defaults to None.
    """

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 feedforward_channels: int,
                 drop_rate: float = 0.,
                 attn_drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 act_cfg: dict = dict(type='GELU'),
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        self.ln1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = PEMultiheadAttention(embed_dims, num_heads, qkv_bias=qkv_bias,
                                         attn_drop=attn_drop_rate, proj_drop=drop_rate)
        self.drop_path = build_dropout(dict(type='DropPath', drop_prob=drop_path_rate))
        self.ln2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = FFN(embed_dims=embed_dims, feedforward_channels=feedforward_channels,
                       num_fcs=2, ffn_drop=drop_rate,
                       dropout_layer=dict(type='DropPath', drop_prob=drop_path_rate),
                       act_cfg=act_cfg)

    def forward(self, x: torch.Tensor, hw_shape: Sequence[int],
                pos_encodings: Sequence[BasePositionEncoding] = (),
                layer_idx: int = 0) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.ln1(x), hw_shape, pos_encodings, layer_idx))
        return self.ffn(self.ln2(x), identity=x)


@MODELS.register_module()
class PEViT(BaseModule):
    """Vision transformer with a configurable position encoding, for comparing encodings
    on equal terms.

    Everything but the position encoding is a plain pre-norm ViT (`ViT
    <https://arxiv.org/abs/2010.11929>`_ / `DeiT <https://arxiv.org/abs/2012.12877>`_).
    ``pos_encoding`` is one config dict, or a list of them applied in order, of any
    :class:`~mmposenc.models.layers.BasePositionEncoding` in the registry (``'NoPositionEncoding'``,
    ``'LearnableAbsolutePE'``, ``'SinCos2dPE'``, ``'RoPE2d'``, ``'RoPEMixed'``,
    ``'DINOv3RoPE'``, ``'RelativePositionBias2d'``, ``'CoPE'``, ``'CAPE2d'``, ``'SaPE2'``,
    ``'PEGPositionEncoding'``, ...). The backbone fills in ``embed_dims``, ``num_heads``,
    ``num_layers``, ``num_extra_tokens`` and, for encodings that take it,
    ``grid_size = img_size // patch_size``. Inputs of any size run: the patch grid is
    whatever the image gives.

    Every layer's attention asks each encoding for its own ``transform_qk`` /
    ``attn_bias`` with the layer's index, so a rotary encoding computes its angles once per
    block: ``DINOv3RoPE`` in training draws its coordinate augmentation afresh in every block,
    as DINOv3's ViT does (``train_draw='per_forward'`` shares one draw by all blocks).

    Args:
        arch (str | dict): ``'tiny'``/``'t'``, ``'small'``/``'s'``, ``'base'``/``'b'``,
            ``'large'``/``'l'`` or a dict with keys ``embed_dims``, ``num_layers``,
            ``num_heads``, ``feedforward_channels``. Defaults to 'base'.
        pos_encoding (dict | list[dict]): The position encoding(s). Defaults to
            ``dict(type='LearnableAbsolutePE')``.
        img_size (int | tuple): Training resolution, to size grid-based encodings.
            Defaults to 224.
        patch_size (int): Defaults to 16.
        in_channels (int): Defaults to 3.
        out_indices (int | Sequence[int]): Layers whose output is returned.
            Defaults to -1.
        with_cls_token (bool): Prepend a class token. Defaults to True.
        out_type (str): ``'cls_token'`` (B, C), ``'avg_featmap'`` (B, C) mean of the
            patch tokens, ``'featmap'`` (B, C, H, W) or ``'raw'`` (B, N, C).
            Defaults to 'cls_token'.
        drop_rate (float): Dropout rate. Defaults to 0.
        drop_path_rate (float): Largest stochastic-depth rate (linear in depth).
            Defaults to 0.
        qkv_bias (bool): Defaults to True.
        norm_cfg (dict): Defaults to ``dict(type='LN', eps=1e-6)``.
        final_norm (bool): Norm the tokens of the last layer. Defaults to True.
        patch_cfg (dict): Extra arguments of ``PatchEmbed``. Defaults to ``dict()``.
        init_cfg (dict | list[dict], optional): Defaults to truncated normal (std 0.02)
            for linear layers.

    Examples:
        >>> import torch
        >>> vit = PEViT(arch=dict(embed_dims=64, num_layers=2, num_heads=4,
        ...                       feedforward_channels=128),
        ...             img_size=32, patch_size=4, pos_encoding=dict(type='RoPE2d'))
        >>> vit(torch.rand(2, 3, 32, 32))[0].shape
        torch.Size([2, 64])
        >>> vit(torch.rand(2, 3, 48, 40))[0].shape  # other resolutions run as they are
        torch.Size([2, 64])
    """

    arch_zoo = {
        **dict.fromkeys(['t', 'tiny', 'deit-t', 'deit-tiny'], {
            'embed_dims': 192, 'num_layers': 12, 'num_heads': 3,
            'feedforward_channels': 768}),
        **dict.fromkeys(['s', 'small', 'deit-s', 'deit-small'], {
            'embed_dims': 384, 'num_layers': 12, 'num_heads': 6,
            'feedforward_channels': 1536}),
        **dict.fromkeys(['b', 'base', 'deit-b', 'deit-base'], {
            'embed_dims': 768, 'num_layers': 12, 'num_heads': 12,
            'feedforward_channels': 3072}),
        **dict.fromkeys(['l', 'large'], {
            'embed_dims': 1024, 'num_layers': 24, 'num_heads': 16,
            'feedforward_channels': 4096}),
    }
    essential_keys = {'embed_dims', 'num_layers', 'num_heads', 'feedforward_channels'}
    OUT_TYPES = ('cls_token', 'avg_featmap', 'featmap', 'raw')

    def __init__(self,
                 arch: Union[str, dict] = 'base',
                 pos_encoding: Union[dict, Sequence[dict]] = dict(type='LearnableAbsolutePE'),
                 img_size: Union[int, Sequence[int]] = 224,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 out_indices: Union[int, Sequence[int]] = -1,
                 with_cls_token: bool = True,
                 out_type: str = 'cls_token',
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.,
                 qkv_bias: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 final_norm: bool = True,
                 patch_cfg: dict = dict(),
                 init_cfg: Optional[Union[dict, list]] = [
                     dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
                     dict(type='Constant', layer='LayerNorm', val=1., bias=0.)
                 ]):
        super().__init__(init_cfg=init_cfg)
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'Arch {arch} is not in default archs '
                                 f'{set(self.arch_zoo)}')
            arch = self.arch_zoo[arch.lower()]
        elif not isinstance(arch, dict) or not self.essential_keys <= set(arch):
            raise ValueError(f'Custom arch needs a dict with keys {self.essential_keys}, '
                             f'got {arch!r}')
        if out_type not in self.OUT_TYPES:
            raise ValueError(f'Unsupported out_type {out_type!r}, choose from '
                             f'{self.OUT_TYPES}')
        if out_type == 'cls_token' and not with_cls_token:
            raise ValueError('out_type="cls_token" needs with_cls_token=True')
        self.arch_settings = dict(arch)
        self.embed_dims = arch['embed_dims']
        self.num_layers = arch['num_layers']
        self.num_heads = arch['num_heads']
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.patch_size = patch_size
        self.out_type = out_type
        self.with_cls_token = with_cls_token
        self.num_extra_tokens = int(with_cls_token)

        self.patch_embed = PatchEmbed(
            **dict(in_channels=in_channels, input_size=None, embed_dims=self.embed_dims,
                   conv_type='Conv2d', kernel_size=patch_size, stride=patch_size,
                   padding='corner', **patch_cfg))
        if with_cls_token:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, self.embed_dims))
        self.drop_after_pos = nn.Dropout(drop_rate)

        grid = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        cfgs = [pos_encoding] if isinstance(pos_encoding, dict) else list(pos_encoding)
        if not cfgs:
            raise ValueError('pos_encoding needs at least one config; use '
                             "dict(type='NoPositionEncoding') for none")
        #: the position encodings, consulted in order
        self.pos_encodings = ModuleList([self._build_pe(c, grid) for c in cfgs])

        if isinstance(out_indices, int):
            out_indices = [out_indices]
        self.out_indices = []
        for i in out_indices:
            if not -self.num_layers <= i < self.num_layers:
                raise ValueError(f'out index {i} out of range for {self.num_layers} layers')
            self.out_indices.append(i % self.num_layers)

        dpr = torch.linspace(0, drop_path_rate, self.num_layers).tolist()
        self.layers = ModuleList([
            PETransformerEncoderLayer(
                self.embed_dims, self.num_heads, arch['feedforward_channels'],
                drop_rate=drop_rate, drop_path_rate=dpr[i], qkv_bias=qkv_bias,
                norm_cfg=norm_cfg) for i in range(self.num_layers)
        ])
        self.final_norm = final_norm
        if final_norm:
            self.ln1 = build_norm_layer(norm_cfg, self.embed_dims)[1]

    def _build_pe(self, cfg: dict, grid) -> BasePositionEncoding:
        cfg = dict(cfg)
        if isinstance(cfg.get('type'), str) and '.' not in cfg['type']:
            # resolve bare names in mmposenc whatever the default scope (mmpretrain, ...)
            cfg['type'] = 'mmposenc.' + cfg['type']
        cls = MODELS.get(cfg['type'])
        if cls is None:
            raise KeyError(f'position encoding {cfg["type"]!r} is not registered')
        if not (inspect.isclass(cls) and issubclass(cls, BasePositionEncoding)):
            raise TypeError(f'{cfg["type"]!r} is not a BasePositionEncoding and cannot be '
                            'a pos_encoding of PEViT')
        cfg.setdefault('embed_dims', self.embed_dims)
        cfg.setdefault('num_heads', self.num_heads)
        cfg.setdefault('num_layers', self.num_layers)
        cfg.setdefault('num_extra_tokens', self.num_extra_tokens)
        if 'grid_size' in inspect.signature(cls).parameters:
            cfg.setdefault('grid_size', grid)
        return MODELS.build(cfg)

    def init_weights(self):
        super().init_weights()
        if self.with_cls_token and not (isinstance(self.init_cfg, dict)
                                        and self.init_cfg.get('type') == 'Pretrained'):
            nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, x: torch.Tensor):
        """Images (B, C_in, H, W) -> tuple of one output per ``out_indices``.

        Outputs are (B, C) for ``'cls_token'``/``'avg_featmap'``, (B, C, h, w) for
        ``'featmap'`` and (B, N, C) for ``'raw'``, with ``(h, w)`` the patch grid.
        """
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects images of shape (B, C, H, W), '
                             f'got {tuple(x.shape)}')
        B = x.shape[0]
        x, hw_shape = self.patch_embed(x)
        if self.with_cls_token:
            x = torch.cat((self.cls_token.expand(B, -1, -1), x), dim=1)
        for pe in self.pos_encodings:
            if 'add_to_tokens' in pe.hooks:
                x = pe.add_to_tokens(x, hw_shape)
        x = self.drop_after_pos(x)
        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x, hw_shape, self.pos_encodings, i)
            for pe in self.pos_encodings:
                if 'layer_hook' in pe.hooks:
                    x = pe.layer_hook(x, hw_shape, i)
            if i == len(self.layers) - 1 and self.final_norm:
                x = self.ln1(x)
            if i in self.out_indices:
                outs.append(self._format_output(x, hw_shape))
        return tuple(outs)

    def _format_output(self, x: torch.Tensor, hw_shape) -> torch.Tensor:
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return x[:, 0]
        patches = x[:, self.num_extra_tokens:]
        if self.out_type == 'avg_featmap':
            return patches.mean(dim=1)
        B, _, C = patches.shape
        return patches.transpose(1, 2).reshape(B, C, *hw_shape)
