"""Swin Transformer with a PEG after the first block of every stage."""
from typing import Optional, Sequence, Union

import torch
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.transformer import PatchEmbed
from mmengine.model import BaseModule, ModuleList

from mmposenc.registry import MODELS
from ..layers.generators.peg import PEG, tokens_to_map


def _swin_block_sequence_cls():
    """mmpretrain's ``SwinBlockSequence``, imported on first use.

    Importing mmpretrain's model package pulls in mmdet when it is installed,
    so it is not imported when :mod:`mmposenc.models` is.
    """
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
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
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

    def forward(self, x: torch.Tensor):
        """Args:
            x (Tensor): Images (B, in_channels, H, W), any H and W.

        Returns:
            tuple[Tensor]: (B, C_i, H_i, W_i) maps of the ``out_indices``
            stages (strides 4, 8, 16, 32).
        """
        if x.dim() != 4:
            raise ValueError(f'{type(self).__name__} expects images of shape (B, C, H, W), '
                             f'got {tuple(x.shape)}')
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
