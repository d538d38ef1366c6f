"""Helpers shared by the checkpoint converters of ``tools/model_converters``."""
from typing import Iterable, Mapping


class UnmappedKeysError(KeyError):
    """Source keys a converter has no mapping for; the message names every one of them."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return self.args[0]


#: Where checkpoints keep their weights (mmengine, official DeiT / Twins / PerViT, timm EMA).
STATE_DICT_KEYS = ('state_dict', 'model', 'state_dict_ema')


def unwrap_state_dict(checkpoint: Mapping) -> Mapping:
    """The state dict inside ``checkpoint``, or the checkpoint itself when it is one.

    Examples:
        >>> unwrap_state_dict({'model': {'w': 1}, 'epoch': 3})
        {'w': 1}
        >>> unwrap_state_dict({'w': 1})
        {'w': 1}
    """
    if isinstance(checkpoint, Mapping):
        for key in STATE_DICT_KEYS:
            if isinstance(checkpoint.get(key), Mapping):
                return checkpoint[key]
    return checkpoint


def check_all_mapped(unmapped: Iterable[str], source: str, target: str) -> None:
    """Raise :class:`UnmappedKeysError` naming every key of ``unmapped`` (if any).

    Args:
        unmapped (Iterable[str]): The source keys no rule maps.
        source (str): What the keys come from (``'DeiT'``, ``'Twins-PCPVT'``, ...).
        target (str): What they were converted to (``'CPVT'``, ...).

    Examples:
        >>> try:
        ...     check_all_mapped(['dist_token'], 'DeiT', 'CPVT')
        ... except KeyError as err:
        ...     print(err)
        1 DeiT keys have no CPVT mapping: ['dist_token']
    """
    unmapped = sorted(unmapped)
    if unmapped:
        raise UnmappedKeysError(
            f'{len(unmapped)} {source} keys have no {target} mapping: {unmapped}')
