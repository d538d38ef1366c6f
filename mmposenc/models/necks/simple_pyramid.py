"""A feature pyramid from the single-stride maps of a plain ViT (BEiT / ViTDet style)."""
import math
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_activation_layer, build_norm_layer
from mmengine.model import BaseModule, ModuleList

from mmposenc.registry import MODELS


def _log2_of_scale(scale: float) -> int:
    """The integer ``k`` with ``scale == 2 ** k``; a clear error otherwise."""
    k = math.log2(scale) if scale > 0 else float('nan')
    if not math.isfinite(k) or k != round(k):
        raise ValueError(f'scales must be powers of two (0.25, 0.5, 1, 2, 4, ...), got {scale}')
    return int(round(k))


@MODELS.register_module()
class SimplePyramid(BaseModule):
    """Rescale the stride-16 maps of a plain ViT (e.g. CPVT) to a feature
    pyramid that FPN-style necks and heads consume unchanged.

    The rescaling of `BEiT <https://arxiv.org/abs/2106.08254>`_'s dense
    heads (mmseg's ``Feature2Pyramid``) and of the simple feature pyramid of
    `ViTDet <https://arxiv.org/abs/2203.16527>`_: a scale of ``2 ** k`` with
    ``k > 0`` is ``k`` stride-2 2x2 transposed convolutions (norm + activation
    between two of them), ``1`` is the identity and ``2 ** -k`` is a
    ``2 ** k`` max pooling (``ceil_mode``, so odd maps lose no pixel).
    Channels are unchanged: put an ``FPN`` after it (a list ``neck=[...]``
    in a config builds an ``nn.Sequential``).

    Args:
        in_channels (int): Channels of every input map (the ViT's
            ``embed_dims``).
        scales (Sequence[float]): Resize factor of each output, powers of two.
            Defaults to ``(4, 2, 1, 0.5)``: strides 4, 8, 16, 32 from a
            stride-16 ViT.
        norm_cfg (dict, optional): Norm between two transposed convolutions.
            Defaults to ``dict(type='GN', num_groups=32)`` (batch-size
            independent, unlike the ``SyncBN`` of mmseg's BEiT configs).
        act_cfg (dict): Activation after that norm. Defaults to
            ``dict(type='GELU')``.
        init_cfg (dict, optional): Initialization config. Defaults to None.

    ``forward`` takes either one map per scale (e.g. CPVT with
    ``out_indices=(2, 5, 8, 11)``, as BEiT) or a single map that is rescaled
    to every scale (ViTDet).

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
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg=init_cfg)
        if not scales:
            raise ValueError('scales must name at least one output scale')
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

    def forward(self, inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, ...]:
        """Args:
            inputs (Sequence[Tensor]): ``len(scales)`` maps, or one, each
                (B, in_channels, H, W).

        Returns:
            tuple[Tensor]: One (B, in_channels, H * s, W * s) map per scale
            ``s`` (rounded up for pooled outputs).
        """
        if len(inputs) == 1:
            inputs = tuple(inputs) * len(self.scales)
        if len(inputs) != len(self.scales):
            raise ValueError(f'{type(self).__name__} with scales {self.scales} takes 1 or '
                             f'{len(self.scales)} maps, got {len(inputs)}')
        for x in inputs:
            if x.dim() != 4 or x.shape[1] != self.in_channels:
                raise ValueError(f'expected (B, {self.in_channels}, H, W) maps, got '
                                 f'{tuple(x.shape)}')
        return tuple(branch(x) for branch, x in zip(self.branches, inputs))

    def extra_repr(self) -> str:
        return f'in_channels={self.in_channels}, scales={self.scales}'
