"""Masked primitives of the padding-exact mode: each gives every image's cells what it
gets alone."""
from typing import Optional, Sequence, Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from .masks import conv_padding_masks, valid_shapes_of_masks


def zero_padding(x: Tensor, mask: Optional[Tensor], value: float = 0.) -> Tensor:
    """``x`` (B, C, h, w) with padded cells (``mask`` True) set to ``value``; ``x`` if no mask.

    Examples:
        >>> import torch
        >>> mask = torch.tensor([[[False, True]]])
        >>> zero_padding(torch.ones(1, 1, 1, 2), mask).tolist()
        [[[[1.0, 0.0]]]]
    """
    if mask is None:
        return x
    return x.masked_fill(mask[:, None], value)


def masked_group_norm(x: Tensor, norm: nn.GroupNorm, padding_mask: Tensor) -> Tensor:
    """GroupNorm with each image's statistics taken over its valid positions only.

    Args:
        x (Tensor): Maps (bs, C, h, w).
        norm (nn.GroupNorm): Provides ``num_groups``, ``eps`` and the affine parameters.
        padding_mask (Tensor): Bool (bs, h, w), True at padded positions (top-left valid).

    Returns:
        Tensor: (bs, C, h, w): ``norm`` of each image's valid rectangle; zero on padding.

    Examples:
        >>> import torch
        >>> gn = nn.GroupNorm(2, 4)
        >>> x, mask = torch.randn(1, 4, 3, 5), torch.ones(1, 3, 5, dtype=torch.bool)
        >>> mask[:, :2, :4] = False
        >>> out = masked_group_norm(x, gn, mask)
        >>> torch.equal(out[..., :2, :4], gn(x[..., :2, :4])), bool((out[..., 2:, :] == 0).all())
        (True, True)
    """
    out = x.new_zeros(x.shape)
    for i, (h, w) in enumerate(valid_shapes_of_masks(padding_mask).tolist()):
        out[i, :, :h, :w] = F.group_norm(x[i:i + 1, :, :h, :w], norm.num_groups, norm.weight,
                                         norm.bias, norm.eps)[0]
    return out


def masked_conv_module(module: nn.Module, x: Tensor,
                       padding_mask: Tensor) -> Tuple[Tensor, Tensor]:
    """An mmcv ``ConvModule`` on padded maps, each image's cells computed as for it alone.

    The convolution must zero-pad; GroupNorm uses :func:`masked_group_norm`.

    Args:
        module (ConvModule): The conv module.
        x (Tensor): Maps (bs, C_in, h, w).
        padding_mask (Tensor): Bool (bs, h, w), True at padded cells.

    Returns:
        tuple[Tensor, Tensor]: The output (bs, C_out, h', w') and its bool mask (bs, h', w').

    Examples:
        >>> import torch
        >>> from mmcv.cnn import ConvModule
        >>> m = ConvModule(4, 8, 3, padding=1, norm_cfg=dict(type='GN', num_groups=2))
        >>> mask = torch.ones(2, 6, 7, dtype=torch.bool)
        >>> mask[0, :6, :5] = mask[1, :4, :7] = False
        >>> out, out_mask = masked_conv_module(m, torch.randn(2, 4, 6, 7), mask)
        >>> tuple(out.shape), torch.equal(out_mask, mask)
        ((2, 8, 6, 7), True)
    """
    conv = module.conv
    if any(k > 1 for k in conv.kernel_size):  # a 1x1 conv does not mix positions
        x = x.masked_fill(padding_mask[:, None], 0)
    x = conv(x)
    out_mask = conv_padding_masks(padding_mask, x.shape[-2:], conv.kernel_size, conv.stride,
                                  conv.padding, conv.dilation)
    if module.with_norm:
        if isinstance(module.norm, nn.GroupNorm):
            x = masked_group_norm(x, module.norm, out_mask)
        else:
            x = module.norm(x)
    if module.with_activation:
        x = module.activate(x)
    return x.masked_fill(out_mask[:, None], 0), out_mask


def interpolate_valid(x: Tensor, src_valid: Sequence[Sequence[int]],
                      dst_valid: Sequence[Sequence[int]], size: Sequence[int]) -> Tensor:
    """Bilinear resize of each image's own cells of ``x`` to its own cells of a ``size`` map.

    Args:
        x (Tensor): Maps (bs, C, h, w).
        src_valid (Sequence[Sequence[int]]): ``(rows, cols)`` of each image in ``x``.
        dst_valid (Sequence[Sequence[int]]): ``(rows, cols)`` of each image in the output.
        size (Sequence[int]): ``(H, W)`` of the output.

    Returns:
        Tensor: (bs, C, H, W), zero outside each image's ``dst_valid`` cells.

    Examples:
        >>> import torch
        >>> x = torch.randn(2, 3, 4, 4)
        >>> out = interpolate_valid(x, [(3, 4), (4, 4)], [(5, 7), (8, 8)], (8, 8))
        >>> alone = F.interpolate(x[:1, :, :3], (5, 7), mode='bilinear', align_corners=False)
        >>> torch.equal(out[:1, :, :5, :7], alone), bool(out[0, :, 5:].eq(0).all())
        (True, True)
    """
    out = x.new_zeros(tuple(x.shape[:2]) + tuple(int(v) for v in size))
    for i, ((sh, sw), (dh, dw)) in enumerate(zip(src_valid, dst_valid)):
        sh, sw, dh, dw = int(sh), int(sw), int(dh), int(dw)
        out[i, :, :dh, :dw] = F.interpolate(x[i:i + 1, :, :sh, :sw], size=(dh, dw),
                                            mode='bilinear', align_corners=False)[0]
    return out
