"""mmdet's ``ChannelMapper`` made padding-exact (GroupNorm over valid positions)."""
from typing import List, Optional, Sequence, Tuple, Union

from mmcv.cnn import ConvModule
from mmcv.cnn.bricks.wrappers import Conv2d as EmptyTensorConv2d
from mmengine.model import BaseModule
from torch import Tensor, nn

from mmposenc.registry import MODELS
from ..padding_exact.masks import as_bool_padding_mask
from ..padding_exact.ops import masked_conv_module

#: the zero-padding convolutions the masked path is exact for
_PLAIN_CONVS = (nn.Conv2d, EmptyTensorConv2d)


@MODELS.register_module()
class MaskedChannelMapper(BaseModule):
    """mmdet's ``ChannelMapper`` (same state-dict keys) made padding-exact by padding masks.

    Without masks it is mmdet's computation; only GroupNorm (or no norm) is made exact.

    Args:
        in_channels (list[int]): Channels of each input map.
        out_channels (int): Channels of every output map.
        kernel_size (int): Kernel of the per-input convolutions. Defaults to 3.
        conv_cfg (dict, optional): Convolution config; only a zero-padded ``nn.Conv2d``
            (None, ``'Conv'``, ``'Conv2d'``), else ValueError. Defaults to None.
        norm_cfg (dict, optional): Norm config, e.g. ``dict(type='GN', num_groups=32)``.
            Defaults to None.
        act_cfg (dict, optional): Activation config. Defaults to ``dict(type='ReLU')``.
        bias (bool | str): As in ``ConvModule``. Defaults to ``'auto'``.
        num_outs (int, optional): Outputs; more than ``len(in_channels)`` adds extra levels.
            Defaults to ``len(in_channels)``.
        init_cfg (dict, optional): Defaults to xavier-uniform convolutions (mmdet's default).

    Examples:
        >>> import torch
        >>> neck = MaskedChannelMapper([16, 32], 8, kernel_size=1, act_cfg=None,
        ...                            norm_cfg=dict(type='GN', num_groups=4), num_outs=3)
        >>> feats = (torch.rand(2, 16, 10, 12), torch.rand(2, 32, 5, 6))
        >>> masks = [torch.zeros(2, 10, 12, dtype=torch.bool),
        ...          torch.zeros(2, 5, 6, dtype=torch.bool)]
        >>> masks[0][1, 7:], masks[1][1, 4:] = True, True  # image 1: 7 x 12 and 4 x 6 cells
        >>> [tuple(o.shape) for o in neck(feats, padding_masks=masks)]
        [(2, 8, 10, 12), (2, 8, 5, 6), (2, 8, 3, 3)]
    """

    def __init__(self,
                 in_channels: List[int],
                 out_channels: int,
                 kernel_size: int = 3,
                 conv_cfg: Optional[dict] = None,
                 norm_cfg: Optional[dict] = None,
                 act_cfg: Optional[dict] = dict(type='ReLU'),
                 bias: Union[bool, str] = 'auto',
                 num_outs: Optional[int] = None,
                 init_cfg: Optional[dict] = dict(
                     type='Xavier', layer='Conv2d', distribution='uniform')) -> None:
        super().__init__(init_cfg=init_cfg)
        if not isinstance(in_channels, (list, tuple)) or not in_channels:
            raise ValueError(f'in_channels must be a non-empty list, got {in_channels!r}')
        num_outs = len(in_channels) if num_outs is None else num_outs
        if num_outs < len(in_channels):
            raise ValueError(f'num_outs ({num_outs}) must be >= len(in_channels) '
                             f'({len(in_channels)})')
        common = dict(conv_cfg=conv_cfg, norm_cfg=norm_cfg, act_cfg=act_cfg, bias=bias)
        self.convs = nn.ModuleList(
            ConvModule(c, out_channels, kernel_size, padding=(kernel_size - 1) // 2, **common)
            for c in in_channels)
        self.extra_convs = None
        if num_outs > len(in_channels):
            self.extra_convs = nn.ModuleList(
                ConvModule(in_channels[-1] if i == 0 else out_channels, out_channels, 3,
                           stride=2, padding=1, **common)
                for i in range(num_outs - len(in_channels)))
        for module in self.modules():
            if isinstance(module, ConvModule):
                self._check_supported(module, conv_cfg)
        #: PaddingExactMixin passes padding masks to necks that declare this
        self.takes_padding_masks = True

    @staticmethod
    def _check_supported(module: ConvModule, conv_cfg: Optional[dict]) -> None:
        """Refuse convolutions other than a zero-padded ``nn.Conv2d`` (ValueError)."""
        conv = module.conv
        padding_mode = getattr(conv, 'padding_mode', None)
        if (type(conv) not in _PLAIN_CONVS or padding_mode != 'zeros'
                or module.with_explicit_padding):
            raise ValueError(
                'MaskedChannelMapper supports only a zero-padded nn.Conv2d (conv_cfg None, '
                "dict(type='Conv') or dict(type='Conv2d'), padding_mode 'zeros'); got "
                f'conv_cfg={conv_cfg!r}, which builds {type(conv).__name__} with '
                f'padding_mode={padding_mode!r}. Use mmdet\'s ChannelMapper '
                "(type='ChannelMapper') for this convolution (its outputs are then not "
                'independent of the padded batch)')

    def forward(self, inputs: Sequence[Tensor],
                padding_masks: Optional[Sequence[Tensor]] = None) -> Tuple[Tensor]:
        """Map every input to ``out_channels``; add the extra levels.

        Args:
            inputs (Sequence[Tensor]): Maps (bs, in_channels[i], h_i, w_i).
            padding_masks (Sequence[Tensor], optional): Bool (bs, h_i, w_i) per input, True
                at padded cells; None: no padding.

        Returns:
            tuple[Tensor]: ``num_outs`` maps (bs, out_channels, h, w).
        """
        if len(inputs) != len(self.convs):
            raise ValueError(f'expected {len(self.convs)} input maps, got {len(inputs)}')
        if padding_masks is None:  # mmdet's ChannelMapper
            outs = [conv(x) for conv, x in zip(self.convs, inputs)]
            if self.extra_convs:
                source = inputs[-1]
                for conv in self.extra_convs:
                    outs.append(conv(source))
                    source = outs[-1]
            return tuple(outs)
        if len(padding_masks) != len(inputs) or any(
                tuple(m.shape) != (x.shape[0], ) + tuple(x.shape[-2:])
                for m, x in zip(padding_masks, inputs)):
            raise ValueError('padding_masks must hold one (bs, h, w) mask per input map, got '
                             f'{[tuple(m.shape) for m in padding_masks]} for maps '
                             f'{[tuple(x.shape) for x in inputs]}')
        padding_masks = [as_bool_padding_mask(m, 'padding_masks') for m in padding_masks]
        outs = [masked_conv_module(conv, x, m)[0]
                for conv, x, m in zip(self.convs, inputs, padding_masks)]
        if self.extra_convs:
            source, mask = inputs[-1], padding_masks[-1]
            for conv in self.extra_convs:
                source, mask = masked_conv_module(conv, source, mask)
                outs.append(source)
        return tuple(outs)
