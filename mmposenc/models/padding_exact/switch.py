"""The switch of the padding-exact mode: one ``padding_exact`` per model and per part.

Every part with a padding-exact mode (backbones, necks, heads) has a bool ``padding_exact``
attribute that it reads at every call. A model's ``padding_exact`` (``model =
dict(padding_exact=False)`` in a config) sets them all: :func:`switch_part_configs` before the
parts are built, :func:`apply_model_switch` after. :func:`refuse_uncovered` is the one rule by
which a backbone refuses, at construction, the settings its mode does not cover.
"""
from typing import List, Optional, Sequence, Tuple

from torch import nn


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
