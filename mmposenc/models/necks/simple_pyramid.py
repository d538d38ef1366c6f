"""A feature pyramid from the single-stride maps of a plain ViT (BEiT / ViTDet style)."""
import math
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule, ModuleList

from mmposenc.registry import MODELS
from ..padding_exact.masks import (as_bool_padding_mask, masks_from_valid_shapes,
                                   valid_shapes_of_masks)
from ..padding_exact.ops import masked_group_norm, zero_padding

#: The steps of the padding-exact mode (a test leaves each out to show it is needed).
EXACT_STEPS = frozenset({'pool', 'norm', 'outputs'})
#: Norms the padding-exact mode covers (BatchNorm in eval mode).
_COVERED_NORMS = ('GN', 'BN', 'BN2d', 'SyncBN')


def _log2_of_scale(scale: float) -> int:
    """The integer ``k`` with ``scale == 2 ** k``; a clear error otherwise."""
    k = math.log2(scale) if scale > 0 else float('nan')
    if not math.isfinite(k) or k != round(k):
        raise ValueError(f'scales must be powers of two (0.25, 0.5, 1, 2, 4, ...), got {scale}')
    return int(round(k))


@MODELS.register_module()
class SimplePyramid(BaseModule):
    """A BEiT / ViTDet simple feature pyramid from a plain ViT's stride-16 maps (e.g. CPVT).

    Scale ``2 ** k``: ``k`` stride-2 2x2 transposed convolutions if ``k > 0``, else identity or
    ``ceil_mode`` max pooling. Takes one map per scale (BEiT) or one for all (ViTDet); channels
    are unchanged (put an ``FPN`` after it).

    Args:
        in_channels (int): Channels of every input map (the ViT's ``embed_dims``).
        scales (Sequence[float]): Resize factor of each output, powers of two. Defaults to
            ``(4, 2, 1, 0.5)``: strides 4, 8, 16, 32 from a stride-16 ViT.
        norm_cfg (dict, optional): Norm between two transposed convolutions.
            Defaults to ``dict(type='GN', num_groups=32)`` (batch-size independent).
        act_cfg (dict): Activation after that norm. Defaults to ``dict(type='GELU')``.
        padding_exact (bool): Take padding masks; needs GN, BN or no norm. Defaults to False.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    Examples:
        >>> import torch
        >>> neck = SimplePyramid(64)
        >>> feats = tuple(torch.rand(1, 64, 6, 10) for _ in range(4))
        >>> [tuple(o.shape) for o in neck(feats)]
        [(1, 64, 24, 40), (1, 64, 12, 20), (1, 64, 6, 10), (1, 64, 3, 5)]
        >>> [tuple(o.shape) for o in neck((torch.rand(1, 64, 5, 7), ))]
        [(1, 64, 20, 28), (1, 64, 10, 14), (1, 64, 5, 7), (1, 64, 3, 4)]
    """

    def __init__(self,
                 in_channels: int,
                 scales: Sequence[float] = (4, 2, 1, 0.5),
                 norm_cfg: Optional[dict] = dict(type='GN', num_groups=32),
                 act_cfg: dict = dict(type='GELU'),
                 padding_exact: bool = False,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not scales:
            raise ValueError('scales must name at least one output scale')
        if padding_exact and norm_cfg is not None and norm_cfg.get(
                'type') not in _COVERED_NORMS and any(_log2_of_scale(s) > 1 for s in scales):
            raise ValueError(f"SimplePyramid: padding_exact=True does not cover norm_cfg type="
                             f"{norm_cfg.get('type')!r}; use GN or BN, or set "
                             'padding_exact=False')
        self.padding_exact = padding_exact
        #: The steps taken with padding masks (all of :data:`EXACT_STEPS`).
        self._exact_steps = EXACT_STEPS
        self.in_channels = in_channels
        self.scales = tuple(scales)
        #: One rescaling branch per entry of ``scales``.
        self.branches = ModuleList(
            [self._branch(_log2_of_scale(s), norm_cfg, act_cfg) for s in self.scales])

    def _branch(self, k: int, norm_cfg: Optional[dict], act_cfg: dict) -> nn.Module:
        if k == 0:
            return nn.Identity()
        if k < 0:
            return nn.MaxPool2d(kernel_size=2**-k, stride=2**-k, ceil_mode=True)
        layers = []
        for i in range(k):
            if i > 0:
                if norm_cfg is not None:
                    layers.append(build_norm_layer(norm_cfg, self.in_channels)[1])
                layers.append(build_activation_layer(act_cfg))
            layers.append(nn.ConvTranspose2d(self.in_channels, self.in_channels, 2, stride=2))
        return nn.Sequential(*layers)

    @property
    def takes_padding_masks(self) -> bool:
        """Whether PaddingExactMixin passes padding masks: ``padding_exact``."""
        return self.padding_exact

    def forward(self, inputs: Sequence[torch.Tensor],
                padding_masks: Optional[Sequence[torch.Tensor]] = None
                ) -> Tuple[torch.Tensor, ...]:
        """Args:
            inputs (Sequence[Tensor]): ``len(scales)`` maps, or one, each (B, in_channels, H, W).
            padding_masks (Sequence[Tensor], optional): Bool (B, H, W) per input, True at
                padded cells; None: no padding.

        Returns:
            tuple[Tensor]: One (B, in_channels, H * s, W * s) map per scale ``s``.
        """
        if padding_masks is not None:
            if len(padding_masks) != len(inputs) or any(
                    tuple(m.shape) != (x.shape[0], ) + tuple(x.shape[-2:])
                    for m, x in zip(padding_masks, inputs)):
                raise ValueError('padding_masks must hold one (B, H, W) mask per input map, '
                                 f'got {[tuple(m.shape) for m in padding_masks]} for maps '
                                 f'{[tuple(x.shape) for x in inputs]}')
            padding_masks = [as_bool_padding_mask(m, 'padding_masks') for m in padding_masks]
            if len(padding_masks) == 1:
                padding_masks = padding_masks * len(self.scales)
        if len(inputs) == 1:
            inputs = tuple(inputs) * len(self.scales)
        if len(inputs) != len(self.scales):
            raise ValueError(f'{type(self).__name__} with scales {self.scales} takes 1 or '
                             f'{len(self.scales)} maps, got {len(inputs)}')
        for x in inputs:
            if x.dim() != 4 or x.shape[1] != self.in_channels:
                raise ValueError(f'expected (B, {self.in_channels}, H, W) maps, got '
                                 f'{tuple(x.shape)}')
        if padding_masks is None:
            return tuple(branch(x) for branch, x in zip(self.branches, inputs))
        return tuple(self._exact_branch(branch, s, x, m) for branch, s, x, m in zip(
            self.branches, self.scales, inputs, padding_masks))

    def _exact_branch(self, branch: nn.Module, scale: float, x: torch.Tensor,
                      mask: torch.Tensor) -> torch.Tensor:
        """One branch on a padded batch; each image's cells as for the image alone."""
        steps = self._exact_steps
        valid = valid_shapes_of_masks(mask)  # (B, 2) cells of the image alone
        k = _log2_of_scale(scale)
        if k < 0:
            if 'pool' in steps:
                x = zero_padding(x, mask, float('-inf'))
            x = branch(x)
            f = 2**-k
            valid = torch.div(valid + f - 1, f, rounding_mode='floor')
        elif k > 0:
            for layer in branch:
                if isinstance(layer, nn.ConvTranspose2d):
                    x = layer(x)
                    valid = valid * 2
                elif isinstance(layer, nn.GroupNorm) and 'norm' in steps:
                    x = masked_group_norm(
                        x, layer, masks_from_valid_shapes(valid.tolist(), x.shape[-2:],
                                                          x.device))
                else:
                    x = layer(x)
        if 'outputs' in steps:
            x = zero_padding(x, masks_from_valid_shapes(valid.tolist(), x.shape[-2:],
                                                        x.device))
        return x

    def extra_repr(self) -> str:
        return f'in_channels={self.in_channels}, scales={self.scales}'
