"""Padding masks of the padding-exact mode: an image owns ``ceil(img / stride)`` cells per axis.

Why not mmdet's interpolated masks: docs/user_guides/padding_exact_eval.md.

Examples:
    >>> measure_stride((810, 1216), (26, 38))
    (32, 32)
    >>> [m.shape for m in feature_padding_masks([(800, 1199), (810, 1216)], (810, 1216),
    ...                                          [(26, 38), (13, 19)])]
    [torch.Size([2, 26, 38]), torch.Size([2, 13, 19])]
    >>> (~feature_padding_masks([(800, 1199)], (810, 1216), [(26, 38)])[0][0]).sum(0).max()
    tensor(25)
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

Shape = Tuple[int, int]


def cells_after_stride(size: int, stride: int) -> int:
    """The cells an axis keeps after a stride that pads its last partial window (``ceil``).

    Args:
        size (int): Cells (or pixels) on the axis.
        stride (int): The layer's stride on the axis.

    Returns:
        int: ``ceil(size / stride)``, in integers.

    Examples:
        >>> cells_after_stride(800, 32), cells_after_stride(810, 32), cells_after_stride(1, 4)
        (25, 26, 1)
    """
    return -(-size // stride)


def strided_shapes(shapes: Sequence[Sequence[int]], stride: Union[int, Sequence[int]]
                   ) -> List[Shape]:
    """The valid ``(rows, cols)`` of each ``(h, w)`` after ``stride`` (int or ``(s_h, s_w)``).

    Examples:
        >>> strided_shapes([(60, 90), (96, 96)], 4), strided_shapes([(7, 5)], (2, 1))
        ([(15, 23), (24, 24)], [(4, 5)])
    """
    s_h, s_w = (stride, stride) if isinstance(stride, int) else stride
    return [(cells_after_stride(h, s_h), cells_after_stride(w, s_w)) for h, w in shapes]


def _fits(stride: int, size: int, feat: int) -> bool:
    """Whether a map of ``feat`` cells is ``ceil(size / stride)``."""
    return cells_after_stride(size, stride) == feat


def _candidates(size: int, feat: int) -> Tuple[int, int]:
    """The smallest stride with ``ceil(size / stride) <= feat`` and the next power of two."""
    lowest = cells_after_stride(size, feat)
    return lowest, 1 << (lowest - 1).bit_length()


def measure_stride(input_shape: Sequence[int], feat_shape: Sequence[int]) -> Shape:
    """The integer stride ``(s_h, s_w)`` with ``feat_shape == ceil(input_shape / s)``.

    Of several fitting strides: one shared by both axes, else the power of two, else the smallest.

    Args:
        input_shape (Sequence[int]): ``(H, W)`` of the batch input (``batch_input_shape``).
        feat_shape (Sequence[int]): ``(h, w)`` of the feature map.

    Returns:
        tuple[int, int]: ``(s_h, s_w)``.

    Raises:
        ValueError: If the map is larger than the input or no integer stride gives its size.

    Examples:
        >>> measure_stride((800, 1199), (25, 38)), measure_stride((810, 1216), (13, 19))
        ((32, 32), (64, 64))
        >>> measure_stride((224, 230), (16, 17))  # not a power of two: ViT-style patches of 14
        (14, 14)
    """
    (H, W), (h, w) = (int(v) for v in input_shape), (int(v) for v in feat_shape)
    if not (0 < h <= H and 0 < w <= W):
        raise ValueError(f'a feature map of {(h, w)} cells cannot come from an input of '
                         f'{(H, W)} pixels by an integer stride >= 1')
    # each axis's fitting strides start at ceil(size / feat): the larger start may fit both
    lowest = max(cells_after_stride(H, h), cells_after_stride(W, w))
    for s in (1 << (lowest - 1).bit_length(), lowest):  # the power of two first
        if _fits(s, H, h) and _fits(s, W, w):
            return s, s
    strides = []
    for size, feat in ((H, h), (W, w)):
        lowest, power = _candidates(size, feat)
        stride = power if _fits(power, size, feat) else lowest if _fits(lowest, size,
                                                                           feat) else None
        if stride is None:
            raise ValueError(
                f'a feature map of {(h, w)} cells is not ceil(input / stride) of the batch '
                f'input {(H, W)} for any integer stride: the exact padding masks need '
                'backbones whose maps have ceil(size / stride) cells (ResNet, padded patch '
                'embeddings)')
        strides.append(stride)
    return tuple(strides)


def valid_feature_shapes(img_shapes: Sequence[Sequence[int]], input_shape: Sequence[int],
                         feat_shape: Sequence[int],
                         stride: Optional[Sequence[int]] = None) -> List[Shape]:
    """The ``(rows, cols)`` each image owns in a map of ``feat_shape`` of the batch input.

    Args:
        img_shapes (Sequence[Sequence[int]]): ``(img_h, img_w)`` of each image.
        input_shape (Sequence[int]): ``(H, W)`` of the batch input.
        feat_shape (Sequence[int]): ``(h, w)`` of the feature map.
        stride (Sequence[int], optional): ``(s_h, s_w)``; measured by :func:`measure_stride`
            when None.

    Returns:
        list[tuple[int, int]]: Valid ``(rows, cols)`` per image, at most ``feat_shape``.
    """
    s_h, s_w = measure_stride(input_shape, feat_shape) if stride is None else stride
    h, w = (int(v) for v in feat_shape)
    return [(min(h, cells_after_stride(int(ih), s_h)),
             min(w, cells_after_stride(int(iw), s_w))) for ih, iw in img_shapes]


def masks_from_valid_shapes(valid_shapes: Sequence[Sequence[int]], feat_shape: Sequence[int],
                            device: Union[str, torch.device, None] = None) -> Tensor:
    """Bool masks (bs, h, w), True = padded, of top-left valid rectangles.

    Args:
        valid_shapes (Sequence[Sequence[int]]): ``(rows, cols)`` valid per image.
        feat_shape (Sequence[int]): ``(h, w)``.
        device (str | torch.device, optional): Device of the masks.

    Returns:
        Tensor: Bool (bs, h, w).
    """
    h, w = (int(v) for v in feat_shape)
    valid = torch.as_tensor([[int(r), int(c)] for r, c in valid_shapes], dtype=torch.long,
                            device=device).view(-1, 2)
    rows = torch.arange(h, device=device).view(1, h, 1)
    cols = torch.arange(w, device=device).view(1, 1, w)
    return (rows >= valid[:, 0].view(-1, 1, 1)) | (cols >= valid[:, 1].view(-1, 1, 1))


StrideLike = Union[int, Sequence[int], None]


def _stride_pair(stride: StrideLike) -> Optional[Shape]:
    if stride is None:
        return None
    if isinstance(stride, int):
        return stride, stride
    s_h, s_w = stride
    return int(s_h), int(s_w)


def feature_padding_masks(img_shapes: Sequence[Sequence[int]], input_shape: Sequence[int],
                          feat_shapes: Sequence[Sequence[int]],
                          device: Union[str, torch.device, None] = None,
                          strides: Optional[Sequence[StrideLike]] = None) -> List[Tensor]:
    """Exact padding masks of feature maps of a padded batch, one per map.

    Args:
        img_shapes (Sequence[Sequence[int]]): ``(img_h, img_w)`` of each image.
        input_shape (Sequence[int]): ``(H, W)`` of the batch input (``batch_input_shape``).
        feat_shapes (Sequence[Sequence[int]]): ``(h, w)`` of each map.
        device (str | torch.device, optional): Device of the masks.
        strides (Sequence[int | tuple[int, int] | None], optional): Each map's stride; None
            measures it (:func:`measure_stride`). Pass strides that are not powers of two.

    Returns:
        list[Tensor]: Bool (bs, h, w) per map, True where the image alone has no cell.

    Raises:
        ValueError: ``strides`` does not give one entry per map.
    """
    if strides is None:
        strides = [None] * len(feat_shapes)
    if len(strides) != len(feat_shapes):
        raise ValueError(f'strides {tuple(strides)} must give one stride per feature map, '
                         f'got {len(feat_shapes)} maps')
    return [
        masks_from_valid_shapes(
            valid_feature_shapes(img_shapes, input_shape, shape, _stride_pair(stride)), shape,
            device) for shape, stride in zip(feat_shapes, strides)
    ]


def as_bool_padding_mask(mask: Tensor, name: str = 'key_padding_mask') -> Tensor:
    """A padding mask as bool (True = padded); a non-bool mask must hold only 0 and 1.

    Args:
        mask (Tensor): The mask, any shape.
        name (str): Its name in the error message. Defaults to ``'key_padding_mask'``.

    Returns:
        Tensor: ``mask`` itself when bool, else ``mask.bool()``.

    Raises:
        ValueError: The mask holds values other than 0 and 1.
    """
    if mask.dtype == torch.bool:
        return mask
    if not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f'{name} must be a bool tensor (True at padded positions) or hold '
                         f'only 0 and 1, got dtype {mask.dtype} with other values')
    return mask.bool()


def valid_shapes_of_masks(masks: Tensor) -> Tensor:
    """Valid ``(rows, cols)`` of top-left-rectangle masks (bs, h, w), a long (bs, 2) tensor."""
    return torch.stack([(~masks[:, :, 0]).sum(1), (~masks[:, 0, :]).sum(1)], 1)


def conv_padding_masks(masks: Tensor, out_shape: Sequence[int], kernel_size: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int] = (1, 1)) -> Tensor:
    """Masks of a convolution's output: the cells the convolution gives each image alone.

    Args:
        masks (Tensor): Bool (bs, h, w) input masks, True = padded (top-left rectangles).
        out_shape (Sequence[int]): ``(h_out, w_out)`` of the convolution's output.
        kernel_size, stride, padding, dilation (Sequence[int]): Those of the convolution.

    Returns:
        Tensor: Bool (bs, h_out, w_out).
    """
    valid = valid_shapes_of_masks(masks)
    out = []
    for axis in range(2):
        v = valid[:, axis]
        span = dilation[axis] * (kernel_size[axis] - 1) + 1
        n = torch.div(v + 2 * padding[axis] - span, stride[axis], rounding_mode='floor') + 1
        out.append(n.clamp(0, int(out_shape[axis])))
    return masks_from_valid_shapes(torch.stack(out, 1).tolist(), out_shape, masks.device)
