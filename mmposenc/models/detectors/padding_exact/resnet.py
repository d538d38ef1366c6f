"""mmdet's ResNet with a padding-exact mode: each image of a padded batch gets, on its own
cells, the maps it gets alone.

Why each operation is exact (``v`` valid cells of an image on an axis, the batch has more):

- Every map of ResNet has ``ceil(v / s)`` cells at stride ``s`` for the image alone (7x7/2 pad 3
  stem, 3x3/2 pad 1 max-pool, 3x3/2 pad 1 and 1x1/2 convolutions all give ``ceil(v / 2)``), so
  the image owns the top-left ``ceil(img / s)`` cells of each batch map
  (:mod:`~mmposenc.models.padding_exact.masks`).
- A convolution with a kernel larger than 1x1 reads, at the image's last cells, the cells just
  beyond them: the image alone reads its zero padding there, the batch reads whatever the
  previous layers left in the padded region (BatchNorm's shift, residual sums: not zero with
  trained weights). Its input's padded region is set to zero first, which reproduces the zero
  padding exactly (the alone image's padding never reaches further than the batch's padded
  region plus the batch's own zero padding).
- The stem's max-pool pads with ``-inf``: its input's padded region is set to ``-inf`` (after
  ReLU zero would do too; ``-inf`` is what the image alone reads whatever precedes the pool).
- 1x1 convolutions (strided or not), BatchNorm in eval mode, ReLU and the residual sums are per
  cell: padded cells never reach valid ones through them.
- The returned maps are zero outside each image's cells (a stock neck then reads zeros there).

Not covered (refused in padding-exact mode): DCN and plugins (attention-like plugins read the
whole map), ``avg_down`` (its ceil-mode average at the border), ``with_cp`` (the recomputation
runs outside the forward that binds the masks), norms other than BatchNorm (GroupNorm averages
over the padding). In training mode BatchNorm with ``norm_eval=False`` averages over the batch,
padding included, as any batch statistics do.
"""
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from mmdet.models.backbones import ResNet
from torch import Tensor, nn

from mmposenc.models.padding_exact.binding import bound_image_shapes
from mmposenc.models.padding_exact.masks import masks_from_valid_shapes, valid_feature_shapes
from mmposenc.models.padding_exact.ops import zero_padding
from mmposenc.models.utils.call_state import CallState
from mmposenc.registry import MODELS

#: The masks of the padding-exact ResNet whose forward is running (bound for the duration of
#: its forward only, under the key :class:`PaddingExactResNet`; the hooks of its modules read
#: them).
_ACTIVE = CallState(
    'mmposenc_resnet_padding_masks',
    why="mmdet's ResNet, BasicBlock and Bottleneck call their convolutions and max-pool as "
    'conv(x) / maxpool(x): the masks reach them only through forward (pre-)hooks')

#: The masking steps of the padding-exact mode (each can be left out to show it is needed).
EXACT_STEPS = frozenset({'conv', 'maxpool', 'outputs'})


class _MaskCache:
    """Padding masks of the maps of one forward, by map size (stride measured from the batch
    input: ResNet's maps have ``ceil(H / s)`` cells with ``s`` a power of two)."""

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
    """Forward hook of a max-pool: its padded cells (``-inf`` where the whole window was
    padding) set to zero, so that no ``-inf`` / NaN flows on through the padded region."""
    state = _ACTIVE.get(PaddingExactResNet)
    if state is None or 'maxpool' not in state.steps:
        return None
    return zero_padding(out, state.mask(out.shape[-2:]))


@MODELS.register_module()
class PaddingExactResNet(ResNet):
    """mmdet's :class:`~mmdet.models.backbones.ResNet` with a padding-exact mode (see the
    module doc for why each operation is exact).

    The same parameters and state dict as mmdet's ResNet (checkpoints load both ways). With
    ``padding_exact=True`` and the image sizes given (``forward``'s ``img_shapes``, passed by
    :class:`~mmposenc.models.detectors.padding_exact.PaddingExactMixin`, or bound by
    :func:`~mmposenc.models.padding_exact.backbone_image_shapes` around a host's call), every
    map of every image equals, on its ``ceil(img / stride)`` cells, the map of the image
    alone, and is zero elsewhere. Without them (or with ``padding_exact=False``) it is
    mmdet's ResNet.

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

    #: :class:`~mmposenc.models.detectors.padding_exact.PaddingExactMixin` passes the image
    #: sizes as ``forward``'s ``img_shapes``
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
        """mmdet's ``train`` (frozen stages, ``norm_eval``), returning the module as
        ``nn.Module.train`` does (mmdet's returns None, so ``model.eval()`` gave None)."""
        super().train(mode)
        return self

    def forward(self, x: Tensor,
                img_shapes: Optional[Sequence[Sequence[int]]] = None) -> Tuple[Tensor, ...]:
        """mmdet's forward; in padding-exact mode with image sizes given, the padded cells of
        every map are masked before each operation that reads neighbours and zeroed in the
        outputs.

        Args:
            x (Tensor): (B, C, H, W) batch input.
            img_shapes (Sequence[Sequence[int]], optional): ``(h, w)`` of each image
                (top-left of ``x``). None: those bound by
                :func:`~mmposenc.models.padding_exact.backbone_image_shapes`, if any.

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
