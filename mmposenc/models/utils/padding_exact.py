"""Padding-exact backbones: the image sizes of a padded batch, passed to the backbone.

A backbone in padding-exact mode gives every image of a padded batch, on the cells the image
owns (``ceil(img / stride)`` per axis, :mod:`mmposenc.models.utils.padding_masks`), the same
maps as the image alone. It needs the image sizes, which a host's ``backbone(batch_inputs)``
does not pass: the detector binds them around that call with :func:`backbone_image_shapes`
(:class:`~mmposenc.models.detectors.exact_padding.ExactPaddingMixin` does in
``extract_feat``), and the backbone reads them with :func:`bound_image_shapes`. The binding is
local to the running thread / asyncio task (:class:`~mmposenc.models.utils.call_state.CallState`)
and keyed by the backbone module, so concurrent calls and other models do not see it. Nothing
bound (a plain ``backbone(x)``, ONNX export, a batch without padding): the backbone runs as
stock.

Examples:
    >>> import torch
    >>> from mmposenc.models.backbones import PVTPEG
    >>> model = PVTPEG('tiny', out_indices=(0, ), padding_exact=True).eval()
    >>> img = torch.rand(1, 3, 60, 90)
    >>> batch = torch.zeros(2, 3, 96, 96)
    >>> batch[0, :, :60, :90] = img[0]
    >>> with torch.no_grad(), backbone_image_shapes(model, [(60, 90), (96, 96)]):
    ...     batched = model(batch)[0]
    >>> with torch.no_grad():
    ...     alone = model(img)[0]
    >>> bool((batched[0, :, :15, :23] - alone[0]).abs().max() < 1e-5)
    True
"""
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .call_state import CallState

Shape = Tuple[int, int]

#: ``(img_h, img_w)`` of each image of the batch a backbone is running on, keyed by the
#: backbone (bound by the detector around ``backbone(batch_inputs)``).
_IMAGE_SHAPES = CallState('mmposenc_backbone_image_shapes')


def refuse_uncovered(name: str, peg_cfg: dict, others: Sequence[Tuple[str, bool]] = ()
                     ) -> None:
    """Refuse the settings a backbone's padding-exact mode does not cover.

    Every PEG backbone's mode covers one zero-padded, stride-1 PEG layer per position; the
    backbone adds its own settings in ``others``.

    Args:
        name (str): The backbone's class name, for the message.
        peg_cfg (dict): The backbone's PEG config.
        others (Sequence[tuple[str, bool]]): ``(setting as written, whether it is set)``.

    Raises:
        ValueError: One line naming every uncovered setting that is set.
    """
    refused = [setting for setting, on in (
        *others,
        ('peg_cfg num_layers != 1', peg_cfg.get('num_layers', 1) != 1),
        ('peg_cfg padding != zeros', peg_cfg.get('padding', 'zeros') != 'zeros'),
        ('peg_cfg stride != 1', peg_cfg.get('stride', 1) != 1)) if on]
    if refused:
        raise ValueError(f'{name}: padding_exact=True does not cover {", ".join(refused)}; '
                         'set padding_exact=False or drop them')


@contextmanager
def backbone_image_shapes(backbone, img_shapes: Optional[Sequence[Sequence[int]]]
                          ) -> Iterator[None]:
    """Bind the image sizes of the batch for ``backbone``'s calls within the context.

    Args:
        backbone (nn.Module): The backbone (the key: only its own forward reads them).
        img_shapes (Sequence[Sequence[int]], optional): ``(img_h, img_w)`` per image, the
            part of the batch input that is image (top-left). None binds nothing.
    """
    if img_shapes is None:
        yield
        return
    shapes = tuple((int(s[0]), int(s[1])) for s in img_shapes)
    with _IMAGE_SHAPES.bind(backbone, shapes):
        yield


def bound_image_shapes(backbone, x: Tensor) -> Optional[List[Shape]]:
    """The image sizes bound for ``backbone``'s running call on the batch input ``x``, or
    None when nothing is bound, the export runs, or no image is padded.

    Raises:
        ValueError: The binding does not match ``x`` (another batch size, or an image larger
            than the batch input).
    """
    shapes = _IMAGE_SHAPES.get(backbone)
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


def zero_padding(x: Tensor, mask: Optional[Tensor], value: float = 0.) -> Tensor:
    """``x`` (B, C, h, w) with the cells where ``mask`` (bool (B, h, w), True = padded) is
    True set to ``value``; ``x`` itself when ``mask`` is None."""
    if mask is None:
        return x
    return x.masked_fill(mask[:, None], value)


def padding_exact_parts(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """The parts of ``model`` with a padding-exact switch: ``(name, module)`` of every module
    with a bool ``padding_exact`` attribute (backbones, necks, heads; each reads it at every
    call), the model itself excluded."""
    return [(name, m) for name, m in model.named_modules()
            if m is not model and isinstance(getattr(m, 'padding_exact', None), bool)]


def switch_part_configs(kwargs: dict, padding_exact: Optional[bool]) -> dict:
    """The model's one switch applied to its parts' configs before they are built: every
    part config (a dict argument, e.g. ``backbone``) that writes ``padding_exact`` gets the
    model's value (a part is built for its mode: a padding-exact ResNet registers its masking
    hooks, a transformer refuses what its mode does not cover). None changes nothing.

    Args:
        kwargs (dict): The model's keyword arguments.
        padding_exact (bool, optional): The model's switch.

    Returns:
        dict: ``kwargs``, the part configs that write ``padding_exact`` copied with it set.
    """
    if padding_exact is None:
        return kwargs
    out = dict(kwargs)
    for key, value in kwargs.items():
        if isinstance(value, dict) and 'padding_exact' in value:
            part = type(value)(value)
            part['padding_exact'] = bool(padding_exact)
            out[key] = part
    return out


def apply_model_switch(model: nn.Module, padding_exact: Optional[bool]) -> None:
    """A model's one switch (``model = dict(padding_exact=False)`` in a config) applied to
    its parts once they are built.

    Args:
        model (nn.Module): The built model.
        padding_exact (bool, optional): None leaves each part as its config sets it; False
            turns every part off (each is then the host's module); True checks that every
            part is on (a part is built for its mode: its masking is set up, and what it does
            not cover refused, when it is built; :func:`switch_part_configs` turned on those
            whose configs write ``padding_exact``).

    Raises:
        ValueError: True and some part was built with ``padding_exact=False``.
    """
    if padding_exact is None:
        return
    parts = padding_exact_parts(model)
    if padding_exact:
        off = [name for name, m in parts if not m.padding_exact]
        if off:
            raise ValueError(f'{type(model).__name__}: padding_exact=True but '
                             f'{", ".join(off)} built with padding_exact=False; set it True in '
                             'their configs (or drop the model-level padding_exact)')
        return
    for _, m in parts:
        m.padding_exact = False
