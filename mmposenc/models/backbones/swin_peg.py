"""Swin Transformer with a PEG after the first block of every stage."""
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmengine.model import BaseModule, ModuleList

from mmposenc.registry import MODELS
from ..layers.generators.peg import PEG, tokens_to_map
from ..padding_exact.binding import bound_image_shapes
from ..padding_exact.masks import cells_after_stride, masks_from_valid_shapes, strided_shapes
from ..padding_exact.ops import zero_padding
from ..padding_exact.switch import refuse_uncovered

#: The masking steps of SwinPEG's padding-exact mode (each can be left out to show it is needed):
#: zero the padded cells before the patch embedding (``'patch_embed'``), every PEG (``'peg'``),
#: every window attention (``'window_input'``: the zeros the image alone pads its windows
#: with) and every patch merging (``'downsample'``); mask the keys beyond the image's own
#: window-padded extent (``'keys'``); zero the padded cells of the outputs (``'outputs'``).
EXACT_STEPS = frozenset({'patch_embed', 'peg', 'window_input', 'downsample', 'keys',
                         'outputs'})
#: Added to the logits of masked keys: exp(-1e4) is 0 in float32 and float64, so a masked key
#: adds exactly nothing to the softmax (mmpretrain's -100 for the shift regions does not).
MASKED = -1e4


def _ceil_to(v: int, m: int) -> int:
    return cells_after_stride(v, m) * m


def exact_window_attention(attn, query: torch.Tensor, hw_shape, valid, steps=EXACT_STEPS):
    """mmpretrain's ``ShiftWindowMSA.forward`` for a padded batch, giving each image what it
    gets alone.

    Alone, an image of ``v`` cells is zero-padded to ``ceil(v / w) * w`` (window ``w``), its
    windows (shifted or not) are those of the grid clipped to that extent, and the zero
    padding tokens are keys (stock Swin does not mask them). In the batch the same windows
    hold the same image tokens; the batch's padded cells up to the image's extent are set to
    zero (its window padding) and the keys beyond the extent masked, so each image query sees
    exactly its keys alone, whose zero tokens included: stock Swin's result, unchanged.

    Args:
        attn (ShiftWindowMSA): The block's attention (mmpretrain).
        query (Tensor): (B, H*W, C), after ``norm1``.
        hw_shape (tuple[int, int]): ``(H, W)``.
        valid (list[tuple[int, int]]): The image's cells per image.
        steps (frozenset): The masking steps taken (see :data:`EXACT_STEPS`).

    Returns:
        Tensor: (B, H*W, C).
    """
    B, L, C = query.shape
    H, W = hw_shape
    ws, shift = attn.window_size, attn.shift_size
    if min(H, W) == ws and not attn.pad_small_map:
        shift = 0
    query = query.view(B, H, W, C)
    if 'window_input' in steps:
        query = query.masked_fill(masks_from_valid_shapes(valid, (H, W), query.device)[..., None],
                                  0)
    pad_r, pad_b = (ws - W % ws) % ws, (ws - H % ws) % ws
    query = F.pad(query, (0, 0, 0, pad_r, 0, pad_b))
    Hp, Wp = query.shape[1], query.shape[2]
    outside = masks_from_valid_shapes([(_ceil_to(h, ws), _ceil_to(w, ws)) for h, w in valid],
                                      (Hp, Wp), query.device)
    if shift > 0:
        query = torch.roll(query, shifts=(-shift, -shift), dims=(1, 2))
        outside = torch.roll(outside, shifts=(-shift, -shift), dims=(1, 2))
    windows = attn.window_partition(query, ws).view(-1, ws**2, C)  # image-major (B * nW)
    mask = attn.get_attn_mask((Hp, Wp), window_size=ws, shift_size=shift, device=query.device)
    if 'keys' in steps:
        keys = attn.window_partition(outside[..., None].to(query.dtype), ws).view(-1, 1, ws**2)
        keys = (keys * MASKED).expand(-1, ws**2, -1)
        mask = keys if mask is None else keys + mask.repeat(B, 1, 1)
    elif mask is not None:
        mask = mask.repeat(B, 1, 1)
    # one mask per window of every image: WindowMSA adds a (nW', N, N) mask to (B_ / nW')
    # groups of windows, here one group
    out = attn.w_msa(windows, mask=mask).view(-1, ws, ws, C)
    x = attn.window_reverse(out, Hp, Wp, ws)
    if shift > 0:
        x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))
    x = x[:, :H, :W, :].contiguous().view(B, H * W, C)
    return attn.drop(x)


def exact_swin_block(block, x: torch.Tensor, hw_shape, valid, steps=EXACT_STEPS):
    """mmpretrain's ``SwinBlock.forward`` with :func:`exact_window_attention` (LayerNorms, the
    FFN and the residual sums are per token)."""
    identity = x
    x = exact_window_attention(block.attn, block.norm1(x), hw_shape, valid, steps) + identity
    return block.ffn(block.norm2(x), identity=x)


def _swin_block_sequence_cls():
    """mmpretrain's ``SwinBlockSequence``, imported on first use.

    Importing mmpretrain's model package pulls in mmdet when it is installed,
    so it is not imported when :mod:`mmposenc.models` is.
    """
    from mmposenc.utils.hosts import check_host
    check_host('mmpretrain', 'SwinPEG')
    from mmpretrain.models.backbones.swin_transformer import SwinBlockSequence
    return SwinBlockSequence


@MODELS.register_module()
class SwinPEG(BaseModule):
    """Swin Transformer + PEG + GAP of `Conditional Positional Encodings for
    Vision Transformers <https://arxiv.org/abs/2102.10882>`_ ([L] §4.6, Table 15).

    `Swin Transformer <https://arxiv.org/abs/2103.14030>`_ (without absolute
    position embedding; its relative position bias is kept) with one
    :class:`PEG` after the first block of every stage. The shifted-window
    blocks are mmpretrain's (``pad_small_map=True``), so parameter names
    match mmpretrain's ``SwinTransformer`` (``patch_embed``,
    ``stages.i.blocks.j``, ``stages.i.downsample``, ``norm{i}``) plus
    ``pegs.i``; any input size works. Classification pools the last map
    with a ``GlobalAveragePooling`` neck.

    Args:
        arch (str | dict): ``'tiny'``, ``'small'``, ``'base'`` (aliases
            ``'t'``, ``'s'``, ``'b'``) or a dict with ``embed_dims``,
            ``depths``, ``num_heads``. Defaults to ``'tiny'``.
        in_channels (int): Input channels. Defaults to 3.
        patch_size (int): Patch size. Defaults to 4.
        window_size (int): Attention window. Defaults to 7.
        peg_cfg (dict): Extra :class:`PEG` arguments. Defaults to ``dict()``.
        out_indices (Sequence[int]): Stages whose (normalised) maps are
            returned. Defaults to ``(3,)``.
        drop_rate (float): Dropout after the patch embedding. Defaults to 0.
        drop_path_rate (float): Stochastic depth. Defaults to 0.1.
        norm_cfg (dict): Output norms. Defaults to ``dict(type='LN')``.
        padding_exact (bool): With the image sizes of a padded batch given
            (``forward``'s ``img_shapes``, passed by mmposenc's detectors, or
            :func:`~mmposenc.models.padding_exact.backbone_image_shapes`), every image gets on its
            ``ceil(img / stride)`` cells the maps it gets alone from stock Swin
            (zero elsewhere): padded cells zeroed before the patch embedding,
            every PEG, window attention and patch merging, and in the windows
            the keys beyond the image's own window-padded extent masked
            (:func:`exact_window_attention`). Same parameters either way. Needs
            PEGs with one zero-padded stride-1 convolution. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> model = SwinPEG(dict(embed_dims=32, depths=[1, 1], num_heads=[1, 2]),
        ...                 out_indices=(0, 1))
        >>> [o.shape for o in model(torch.rand(1, 3, 50, 70))]
        [torch.Size([1, 32, 13, 18]), torch.Size([1, 64, 7, 9])]
    """
    arch_zoo = {
        **dict.fromkeys(['t', 'tiny'], dict(embed_dims=96, depths=[2, 2, 6, 2],
                                            num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['s', 'small'], dict(embed_dims=96, depths=[2, 2, 18, 2],
                                             num_heads=[3, 6, 12, 24])),
        **dict.fromkeys(['b', 'base'], dict(embed_dims=128, depths=[2, 2, 18, 2],
                                            num_heads=[4, 8, 16, 32])),
    }
    essential_keys = {'embed_dims', 'depths', 'num_heads'}

    #: mmposenc's detectors and segmentors pass the image sizes of a padded batch as
    #: ``forward``'s ``img_shapes`` (:func:`~mmposenc.models.padding_exact.run_backbone`)
    takes_image_shapes = True

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 in_channels: int = 3,
                 patch_size: int = 4,
                 window_size: int = 7,
                 peg_cfg: dict = dict(),
                 out_indices: Sequence[int] = (3,),
                 drop_rate: float = 0.,
                 drop_path_rate: float = 0.1,
                 norm_cfg: dict = dict(type='LN'),
                 padding_exact: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if padding_exact:
            refuse_uncovered('SwinPEG', peg_cfg)
        self.padding_exact = padding_exact
        #: The masking steps taken in padding-exact mode (all of :data:`EXACT_STEPS`).
        self._exact_steps = EXACT_STEPS
        if isinstance(arch, str):
            if arch.lower() not in self.arch_zoo:
                raise ValueError(f'Arch {arch} is not in default archs {set(self.arch_zoo)}')
            arch = self.arch_zoo[arch.lower()]
        elif not isinstance(arch, dict) or not self.essential_keys <= set(arch):
            raise ValueError(f'Custom arch needs a dict with keys {self.essential_keys}')
        if len(arch['depths']) != len(arch['num_heads']):
            raise ValueError('arch depths and num_heads must have the same length, got '
                             f"{arch['depths']} and {arch['num_heads']}")
        self.arch_settings = arch
        self.depths = list(arch['depths'])
        self.num_stages = len(self.depths)
        if isinstance(out_indices, int):
            out_indices = (out_indices,)
        out_indices = tuple(self.num_stages + i if i < 0 else i for i in out_indices)
        for i in out_indices:
            if not 0 <= i < self.num_stages:
                raise ValueError(f'out_indices must be in [0, {self.num_stages}), got {i}')
        self.out_indices = out_indices

        self.patch_embed = PatchEmbed(
            in_channels=in_channels, embed_dims=arch['embed_dims'], conv_type='Conv2d',
            kernel_size=patch_size, stride=patch_size, padding='corner',
            norm_cfg=dict(type='LN'))
        self.drop_after_pos = torch.nn.Dropout(p=drop_rate)
        dpr = torch.linspace(0, drop_path_rate, sum(self.depths)).tolist()
        SwinBlockSequence = _swin_block_sequence_cls()
        self.stages = ModuleList()
        #: One PEG per stage (stable name for ``custom_keys``).
        self.pegs = ModuleList()
        self.num_features = []
        dims = arch['embed_dims']
        for i, (depth, heads) in enumerate(zip(self.depths, arch['num_heads'])):
            stage = SwinBlockSequence(
                embed_dims=dims, depth=depth, num_heads=heads, window_size=window_size,
                downsample=i < self.num_stages - 1, drop_paths=dpr[:depth],
                pad_small_map=True)
            dpr = dpr[depth:]
            self.stages.append(stage)
            self.pegs.append(PEG(dims, **peg_cfg))
            self.num_features.append(dims)
            dims = stage.out_channels
        for i in out_indices:
            self.add_module(f'norm{i}', build_norm_layer(norm_cfg, self.num_features[i])[1])

    def forward(self, x: torch.Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None):
        """Args:
            x (Tensor): Images (B, in_channels, H, W), any H and W.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image of a
                padded batch (top-left of ``x``), for the padding-exact mode. None: those
                bound by :func:`~mmposenc.models.padding_exact.backbone_image_shapes`, if any.

        Returns:
            tuple[Tensor]: (B, C_i, H_i, W_i) maps of the ``out_indices``
            stages (strides 4, 8, 16, 32).
        """
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects images of shape (B, C, H, W), '
                             f'got {tuple(x.shape)}')
        valid = bound_image_shapes(self, x, img_shapes) if self.padding_exact else None
        if valid is not None:
            return self._exact_forward(x, valid)
        x, hw_shape = self.patch_embed(x)
        x = self.drop_after_pos(x)
        outs = []
        for i, stage in enumerate(self.stages):
            for j, block in enumerate(stage.blocks):
                x = block(x, hw_shape)
                if j == 0:
                    x = self.pegs[i](x, hw_shape)
                    hw_shape = self.pegs[i].out_shape(hw_shape)  # padding='none' shrinks it
            if i in self.out_indices:
                out = getattr(self, f'norm{i}')(x)
                outs.append(tokens_to_map(out, hw_shape).contiguous())
            if stage.downsample is not None:
                x, hw_shape = stage.downsample(x, hw_shape)
        return tuple(outs)

    def _exact_forward(self, x: torch.Tensor, valid):
        """:meth:`forward` of a padded batch whose images own ``valid`` pixels each."""
        steps = self._exact_steps

        def zero_tokens(tokens, mask):
            return tokens.masked_fill(mask.flatten(1)[..., None], 0)

        if 'patch_embed' in steps:
            x = zero_padding(x, masks_from_valid_shapes(valid, x.shape[-2:], x.device))
        k = self.patch_embed.projection.stride
        valid = strided_shapes(valid, tuple(k))  # 'corner' padding
        x, hw_shape = self.patch_embed(x)
        x = self.drop_after_pos(x)
        outs = []
        for i, stage in enumerate(self.stages):
            mask = masks_from_valid_shapes(valid, hw_shape, x.device)
            for j, block in enumerate(stage.blocks):
                x = exact_swin_block(block, x, hw_shape, valid, steps)
                if j == 0:
                    if 'peg' in steps:  # its zero padding
                        x = zero_tokens(x, mask)
                    x = self.pegs[i](x, hw_shape)
            if i in self.out_indices:
                out = tokens_to_map(getattr(self, f'norm{i}')(x), hw_shape).contiguous()
                outs.append(zero_padding(out, mask) if 'outputs' in steps else out)
            if stage.downsample is not None:
                if 'downsample' in steps:  # the 2 x 2 merging pads the image with zeros
                    x = zero_tokens(x, mask)
                x, hw_shape = stage.downsample(x, hw_shape)
                valid = strided_shapes(valid, 2)
        return tuple(outs)
