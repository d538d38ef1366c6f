"""The ``padding_exact`` switch of a model and of its parts (backbones, necks, heads)."""
from typing import List, Optional, Sequence, Tuple

from torch import nn


def refuse_uncovered(name: str, peg_cfg: dict, others: Sequence[Tuple[str, bool]] = ()
                     ) -> None:
    """Refuse the settings a backbone's padding-exact mode does not cover.

    Args:
        name (str): The backbone's class name, for the message.
        peg_cfg (dict): The backbone's PEG config.
        others (Sequence[tuple[str, bool]]): ``(setting as written, whether it is set)``.

    Raises:
        ValueError: One line naming every uncovered setting that is set.

    Examples:
        >>> refuse_uncovered('PVTPEG', dict(num_layers=1), [('with_cp', False)])  # covered
        >>> refuse_uncovered('PVTPEG', dict(num_layers=2))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: PVTPEG: padding_exact=True does not cover peg_cfg num_layers != 1; ...
    """
    refused = [setting for setting, on in (
        *others,
        ('peg_cfg num_layers != 1', peg_cfg.get('num_layers', 1) != 1),
        ('peg_cfg padding != zeros', peg_cfg.get('padding', 'zeros') != 'zeros'),
        ('peg_cfg stride != 1', peg_cfg.get('stride', 1) != 1)) if on]
    if refused:
        raise ValueError(f'{name}: padding_exact=True does not cover {", ".join(refused)}; '
                         'set padding_exact=False or drop them')


def padding_exact_parts(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of every submodule with a bool ``padding_exact`` attribute."""
    return [(name, m) for name, m in model.named_modules()
            if m is not model and isinstance(getattr(m, 'padding_exact', None), bool)]


def switch_part_configs(kwargs: dict, padding_exact: Optional[bool]) -> dict:
    """The model's switch set in every part config that writes ``padding_exact``, pre-build.

    Args:
        kwargs (dict): The model's keyword arguments.
        padding_exact (bool, optional): The model's switch; None changes nothing.

    Returns:
        dict: ``kwargs`` with those part configs copied and set.
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
    """The model's switch applied to its built parts.

    Args:
        model (nn.Module): The built model.
        padding_exact (bool, optional): None leaves the parts; False turns all off; True
            checks all are on (a part is built for its mode).

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
