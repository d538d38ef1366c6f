"""Padding masks of the padding-exact mode and their arithmetic (pure torch).

An image of ``img_h x img_w`` pixels alone gives a backbone feature map of
``ceil(img_h / s) x ceil(img_w / s)`` tokens at stride ``s`` (ResNet's stride-2 convolutions with
"same" padding, the extra stride-2 3x3 level of a ``ChannelMapper``, patch embeddings that pad the
last partial patch). In a batch padded to ``H x W`` the same image occupies the top-left corner of
a ``ceil(H / s) x ceil(W / s)`` map, and the tokens it owns are exactly the first
``ceil(img_h / s)`` rows and ``ceil(img_w / s)`` columns: :func:`feature_padding_masks` marks the
others as padding, whatever ``H``, ``W`` and the preprocessor's ``pad_size_divisor``.

mmdet's DETR-family detectors instead nearest-interpolate the pixel mask to the feature size, which
marks ``ceil(img_h * h / H)`` rows valid. That is the same count only when ``H`` is a multiple of
``s``; otherwise an image can get one more "valid" row or column in a batch than alone (800 px at
stride 32 padded to 810: 26 rows against 25), and attention, sine normalisation, CAPE and
``valid_ratios`` all see one row of padding as image.

The stride of each map is measured from its shape and the batch input shape where it is not
given, so dilated backbones (DC5: stride 16 at C5) and extra levels (stride 64) are handled alike.
Several strides can give a small map the same size (``ceil(98 / 14) == ceil(98 / 16) == 7``);
the measurement then prefers the power of two, so strides that are not powers of two (ViT
patches of 14) must be given (``strides`` of :func:`feature_padding_masks`, ``backbone_strides``
/ ``encoder_strides`` of the detectors).

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
    """The cells an axis of ``size`` cells keeps after a stride-``stride`` layer that pads its
    last partial window (``ceil(size / stride)``): what an image alone gets from a padded patch
    embedding, a stride-2 "same" convolution or a ``ceil_mode`` pooling, and so the cells the
    image owns in the map of a padded batch. The one place of this arithmetic in mmposenc.

    Args:
        size (int): Cells (or pixels) on the axis.
        stride (int): The layer's stride on the axis.

    Returns:
        int: ``ceil(size / stride)``, in integers (exact for any size).

    Examples:
        >>> cells_after_stride(800, 32), cells_after_stride(810, 32), cells_after_stride(1, 4)
        (25, 26, 1)
    """
    return -(-size // stride)


def strided_shapes(shapes: Sequence[Sequence[int]], stride: Union[int, Sequence[int]]
                   ) -> List[Shape]:
    """:func:`cells_after_stride` of each ``(h, w)`` of ``shapes``: the valid ``(rows, cols)``
    of each image after a layer of ``stride`` (an int or ``(s_h, s_w)``).

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
    """The smallest stride with ``ceil(size / stride) <= feat`` and the smallest power of two
    not below it (the two strides :func:`measure_stride` tries, in reverse order)."""
    lowest = cells_after_stride(size, feat)
    return lowest, 1 << (lowest - 1).bit_length()


def measure_stride(input_shape: Sequence[int], feat_shape: Sequence[int]) -> Shape:
    """The integer stride ``(s_h, s_w)`` with which a map of ``feat_shape`` cells was computed
    from an input of ``input_shape`` pixels, assuming ``feat = ceil(input / s)``.

    Several strides can give the same size (``ceil(96 / s) == 3`` for ``s`` in 32..47, and any
    ``s >= H`` gives one cell). The choice: one stride for both axes if one fits both, the power
    of two among the fitting strides if there is one (there is at most one: the fitting strides
    span less than a factor of two when a map has at least two cells), else the smallest.

    Args:
        input_shape (Sequence[int]): ``(H, W)`` of the batch input (``batch_input_shape``).
        feat_shape (Sequence[int]): ``(h, w)`` of the feature map.

    Returns:
        tuple[int, int]: ``(s_h, s_w)``.

    Raises:
        ValueError: If the map is larger than the input or no integer stride gives its size
            (a backbone that rounds sizes down: its padded batch has cells that an image alone
            does not have, and no exact mask exists).

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
    # the strides that fit an axis are an integer interval starting at ceil(size / feat): if
    # the two intervals meet, the larger start fits both
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
    """``(ceil(img_h / s_h), ceil(img_w / s_w))`` of each image: the cells it owns in a map of
    ``feat_shape`` computed from a batch input of ``input_shape``.

    Args:
        img_shapes (Sequence[Sequence[int]]): ``(img_h, img_w)`` of each image (its
            ``img_shape`` metainfo: the part of the batch input that is image).
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
        strides (Sequence[int | tuple[int, int] | None], optional): The stride of each map
            where it is known; None (or a None entry) measures it (:func:`measure_stride`),
            which can pick the wrong one of several strides that give a small map the same
            size (a stride-14 map of at most 7 cells is also ``ceil(H / 16)``). Pass the
            strides of backbones whose strides are not powers of two.

    Returns:
        list[Tensor]: Bool (bs, h, w) per map, True where the image alone has no cell:
        exactly ``ceil(img_h / s) x ceil(img_w / s)`` cells are False per image.

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
    """A padding mask as bool (True = padded): the one rule of MaskedPEG, MultiLevelMaskedPEG
    and MaskedChannelMapper. A mask of another dtype must hold only 0 and 1 (a uint8 mask's
    ``~`` is 254 / 255, a float mask of weights is no mask): anything else is refused.

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
    """Valid ``(rows, cols)`` of top-left-rectangle masks (bs, h, w) as a long (bs, 2) tensor
    (counted along the first column and the first row, as mmdet's ``get_valid_ratio``)."""
    return torch.stack([(~masks[:, :, 0]).sum(1), (~masks[:, 0, :]).sum(1)], 1)


def conv_padding_masks(masks: Tensor, out_shape: Sequence[int], kernel_size: Sequence[int],
                       stride: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int] = (1, 1)) -> Tensor:
    """Masks of the output of a convolution on masked maps: each image keeps the cells that
    the same convolution gives on the image alone, ``(v + 2p - d(k - 1) - 1) // s + 1``.

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
