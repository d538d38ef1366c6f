"""mmdet's ResNet with a padding-exact mode (see ``docs/user_guides/padding_exact_eval.md``)."""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmdet.models.backbones import ResNet
from torch import Tensor, nn

from mmposenc.models.padding_exact.binding import bound_image_shapes
from mmposenc.models.padding_exact.masks import masks_from_valid_shapes, valid_feature_shapes
from mmposenc.models.padding_exact.ops import zero_padding
from mmposenc.models.utils.call_state import CallState
from mmposenc.registry import MODELS

#: The masks of the running padding-exact ResNet forward (read by its modules' hooks).
_ACTIVE = CallState(
    'mmposenc_resnet_padding_masks',
    why="mmdet's ResNet, BasicBlock and Bottleneck call their convolutions and max-pool as "
    'conv(x) / maxpool(x): the masks reach them only through forward (pre-)hooks')

#: The masking steps of the padding-exact mode (tests leave one out).
EXACT_STEPS = frozenset({'conv', 'maxpool', 'outputs'})


class _MaskCache:
    """Padding masks of the maps of one forward, by map size."""

    def __init__(self, img_shapes: List[Tuple[int, int]], input_shape: Sequence[int],
                 steps: frozenset, device: torch.device) -> None:
        self.img_shapes = img_shapes
        self.input_shape = tuple(input_shape)
        self.steps = steps
        self.device = device
        self._masks: Dict[Tuple[int, int], Tensor] = {}

    def mask(self, hw: Sequence[int]) -> Tensor:
        hw = (int(hw[0]), int(hw[1]))
        if hw not in self._masks:
            valid = valid_feature_shapes(self.img_shapes, self.input_shape, hw)
            self._masks[hw] = masks_from_valid_shapes(valid, hw, self.device)
        return self._masks[hw]


def _zero_before(module: nn.Module, args: tuple):
    """Forward pre-hook of a convolution that reads neighbours: padded cells set to zero."""
    state = _ACTIVE.get(PaddingExactResNet)
    if state is None or 'conv' not in state.steps:
        return None
    x = args[0]
    return (zero_padding(x, state.mask(x.shape[-2:])), ) + tuple(args[1:])


def _neg_inf_before(module: nn.Module, args: tuple):
    """Forward pre-hook of a max-pool: padded cells set to ``-inf`` (its own padding)."""
    state = _ACTIVE.get(PaddingExactResNet)
    if state is None or 'maxpool' not in state.steps:
        return None
    x = args[0]
    return (zero_padding(x, state.mask(x.shape[-2:]), float('-inf')), ) + tuple(args[1:])


def _zero_after(module: nn.Module, args: tuple, out: Tensor):
    """Forward hook of a max-pool: padded cells set to zero (no ``-inf`` flows on)."""
    state = _ACTIVE.get(PaddingExactResNet)
    if state is None or 'maxpool' not in state.steps:
        return None
    return zero_padding(out, state.mask(out.shape[-2:]))


@MODELS.register_module()
class PaddingExactResNet(ResNet):
    """mmdet's :class:`~mmdet.models.backbones.ResNet` with a padding-exact mode (same state
    dict): given the image sizes, each image's maps equal those of the image alone.

    Args:
        padding_exact (bool): The padding-exact mode. Defaults to True.
        **kwargs: mmdet's :class:`~mmdet.models.backbones.ResNet` arguments.

    Examples:
        >>> import torch
        >>> model = PaddingExactResNet(depth=18, out_indices=(3, )).eval()
        >>> batch = torch.zeros(2, 3, 128, 128)
        >>> batch[0, :, :70, :90] = torch.rand(3, 70, 90)
        >>> with torch.no_grad():  # image 0 owns ceil(70 / 32) x ceil(90 / 32) cells
        ...     out = model(batch, img_shapes=[(70, 90), (128, 128)])[0]
        >>> out.shape, bool((out[0, :, 3:] == 0).all() and (out[0, :, :, 3:] == 0).all())
        (torch.Size([2, 512, 4, 4]), True)
    """

    #: ``forward`` takes ``img_shapes``
    takes_image_shapes = True

    def __init__(self, *args, padding_exact: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.padding_exact = padding_exact
        #: The masking steps taken (all of :data:`EXACT_STEPS`; tests leave one out).
        self._exact_steps = EXACT_STEPS
        if not padding_exact:
            return
        refused = [name for name, on in (
            ('dcn', self.dcn is not None), ('plugins', self.plugins is not None),
            ('avg_down', self.avg_down), ('with_cp', self.with_cp)) if on]
        norm = self.norm_cfg.get('type', 'BN')
        if norm not in ('BN', 'BN2d', 'SyncBN'):
            refused.append(f"norm_cfg type {norm!r}")
        if refused:
            raise ValueError(f'PaddingExactResNet: padding_exact=True does not cover '
                             f'{", ".join(refused)}; set padding_exact=False or drop them')
        for m in self.modules():
            if isinstance(m, nn.Conv2d) and tuple(m.kernel_size) != (1, 1):
                m.register_forward_pre_hook(_zero_before)
            elif isinstance(m, nn.MaxPool2d):
                m.register_forward_pre_hook(_neg_inf_before)
                m.register_forward_hook(_zero_after)

    def train(self, mode: bool = True) -> 'PaddingExactResNet':
        """mmdet's ``train``, returning the module (mmdet's returns None)."""
        super().train(mode)
        return self

    def forward(self, x: Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None) -> Tuple[Tensor, ...]:
        """mmdet's forward, masking the padding when the image sizes are given.

        Args:
            x (Tensor): (B, C, H, W) batch input.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image. None:
                those bound by :func:`~mmposenc.models.padding_exact.backbone_image_shapes`.

        Returns:
            tuple[Tensor]: The ``out_indices`` maps.
        """
        shapes: Optional[List] = (bound_image_shapes(self, x, img_shapes)
                                  if self.padding_exact else None)
        if shapes is None:
            return super().forward(x)
        state = _MaskCache(shapes, x.shape[-2:], frozenset(self._exact_steps), x.device)
        with _ACTIVE.bind(PaddingExactResNet, state):
            outs = super().forward(x)
        if 'outputs' not in state.steps:
            return outs
        return tuple(zero_padding(o, state.mask(o.shape[-2:])) for o in outs)
