"""Padding-exact backbones: the image sizes of a padded batch, given to the backbone.

A backbone in padding-exact mode gives every image of a padded batch, on the cells the image
owns (``ceil(img / stride)`` per axis, :mod:`mmposenc.models.padding_exact.masks`), the same
maps as the image alone. It needs the image sizes: the detectors and segmentors of mmposenc
pass them as an argument, ``backbone(batch_inputs, img_shapes=...)``, to a backbone that
declares ``takes_image_shapes`` (:func:`run_backbone`). A host's own ``extract_feat`` (mmdet's,
mmseg's, mmpretrain's) calls ``backbone(batch_inputs)`` with nothing more; code that runs a host
model with a padding-exact backbone binds the sizes around that call with
:func:`backbone_image_shapes` instead. The binding is local to the running thread / asyncio
task (:class:`~mmposenc.models.utils.call_state.CallState`) and keyed by the backbone module,
so concurrent calls and other models do not see it. The backbone reads either with
:func:`bound_image_shapes`. Neither (a plain ``backbone(x)``, ONNX export, a batch without
padding): the backbone runs as stock.

Examples:
    >>> import torch
    >>> from mmposenc.models.backbones import PVTPEG
    >>> model = PVTPEG('tiny', out_indices=(0, ), padding_exact=True).eval()
    >>> img = torch.rand(1, 3, 60, 90)
    >>> batch = torch.zeros(2, 3, 96, 96)
    >>> batch[0, :, :60, :90] = img[0]
    >>> with torch.no_grad():
    ...     batched = model(batch, img_shapes=[(60, 90), (96, 96)])[0]
    ...     alone = model(img)[0]
    >>> bool((batched[0, :, :15, :23] - alone[0]).abs().max() < 1e-5)
    True
"""
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ..utils.call_state import CallState

Shape = Tuple[int, int]

#: ``(img_h, img_w)`` of each image of the batch a backbone is running on, keyed by the
#: backbone (bound around a host's ``backbone(batch_inputs)``).
_IMAGE_SHAPES = CallState(
    'mmposenc_backbone_image_shapes',
    why="a host's extract_feat (mmdet, mmseg, mmpretrain) calls backbone(batch_inputs) with no "
    'image sizes: code running a host model with a padding-exact backbone binds them around '
    "that call (mmposenc's own detectors and segmentors pass img_shapes as an argument)")


def _as_shapes(img_shapes: Sequence[Sequence[int]]) -> Tuple[Shape, ...]:
    return tuple((int(s[0]), int(s[1])) for s in img_shapes)


@contextmanager
def backbone_image_shapes(backbone, img_shapes: Optional[Sequence[Sequence[int]]]
                          ) -> Iterator[None]:
    """Bind the image sizes of the batch for ``backbone``'s calls within the context (for a
    caller that cannot pass them: a host's ``extract_feat``).

    Args:
        backbone (nn.Module): The backbone (the key: only its own forward reads them).
        img_shapes (Sequence[Sequence[int]], optional): ``(img_h, img_w)`` per image, the
            part of the batch input that is image (top-left). None binds nothing.
    """
    if img_shapes is None:
        yield
        return
    with _IMAGE_SHAPES.bind(backbone, _as_shapes(img_shapes)):
        yield


def bound_image_shapes(backbone, x: Tensor,
                       img_shapes: Optional[Sequence[Sequence[int]]] = None
                       ) -> Optional[List[Shape]]:
    """The image sizes of ``backbone``'s running call on the batch input ``x``: ``img_shapes``
    when given (the argument of the backbone's forward), else those bound by
    :func:`backbone_image_shapes`; None when there are none, the export runs, or no image is
    padded.

    Raises:
        ValueError: The sizes do not match ``x`` (another batch size, or an image larger than
            the batch input).
    """
    shapes = (_IMAGE_SHAPES.get(backbone) if img_shapes is None else _as_shapes(img_shapes))
    if shapes is None or torch.onnx.is_in_onnx_export():
        return None
    H, W = x.shape[-2:]
    if len(shapes) != x.shape[0] or any(h > H or w > W or h < 1 or w < 1 for h, w in shapes):
        raise ValueError(f'backbone_image_shapes: the bound image sizes {shapes} do not fit '
                         f'the batch input {tuple(x.shape)}: bind one (h, w) <= (H, W) per '
                         'image of the batch passed to the backbone')
    if all(h == H and w == W for h, w in shapes):
        return None
    return list(shapes)


def run_backbone(backbone: nn.Module, inputs: Tensor,
                 img_shapes: Optional[Sequence[Sequence[int]]]):
    """``backbone(inputs)``, with ``img_shapes=`` when the backbone declares
    ``takes_image_shapes`` (a padding-exact backbone) and sizes are given; a host backbone
    is called as the host calls it.

    Args:
        backbone (nn.Module): The backbone.
        inputs (Tensor): (B, C, H, W) batch input.
        img_shapes (Sequence[Sequence[int]], optional): ``(img_h, img_w)`` per image, or
            None (no padded image).

    Returns:
        The backbone's output.
    """
    if img_shapes is None or not getattr(backbone, 'takes_image_shapes', False):
        return backbone(inputs)
    return backbone(inputs, img_shapes=img_shapes)
