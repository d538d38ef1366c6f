"""The image sizes of a padded batch, passed to or bound for a padding-exact backbone.

See docs/user_guides/padding_exact_eval.md for when to bind them around a host's call.

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

#: ``(img_h, img_w)`` per image of the batch a backbone runs on, keyed by the backbone.
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
    """Bind the batch's image sizes for ``backbone``'s calls within the context.

    Args:
        backbone (nn.Module): The backbone (only its own forward reads them).
        img_shapes (Sequence[Sequence[int]], optional): ``(img_h, img_w)`` per image, or
            None (binds nothing).
    """
    if img_shapes is None:
        yield
        return
    with _IMAGE_SHAPES.bind(backbone, _as_shapes(img_shapes)):
        yield


def bound_image_shapes(backbone, x: Tensor,
                       img_shapes: Optional[Sequence[Sequence[int]]] = None
                       ) -> Optional[List[Shape]]:
    """The image sizes of ``backbone``'s call on ``x``: ``img_shapes``, else the bound ones.

    None when there are none, during ONNX export, or when no image is padded.

    Raises:
        ValueError: The sizes do not match ``x``'s batch size or spatial size.
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
    """``backbone(inputs)``, passing ``img_shapes=`` if the backbone ``takes_image_shapes``.

    Args:
        backbone (nn.Module): The backbone.
        inputs (Tensor): (B, C, H, W) batch input.
        img_shapes (Sequence[Sequence[int]], optional): ``(img_h, img_w)`` per image, or None.

    Returns:
        The backbone's output.
    """
    if img_shapes is None or not getattr(backbone, 'takes_image_shapes', False):
        return backbone(inputs)
    return backbone(inputs, img_shapes=img_shapes)
