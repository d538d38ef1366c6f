"""Helpers the padding-exactness tests share (imported by name: ``tests/`` is on ``sys.path``
through its conftest)."""
import torch
from torch import nn

#: the norms a trained model has moved away from their initialisation
NORMS = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm2d)


def randomise_norms(model: nn.Module, gen: torch.Generator, types=NORMS) -> nn.Module:
    """Trained-like norms, in place: random affine parameters of every norm of ``types`` and
    random BatchNorm statistics. Freshly initialised norms (and zero-initialised residual
    norms) keep the padded region of a CNN zero, which hides every border effect.

    Returns:
        nn.Module: ``model``.

    Examples:
        >>> model = randomise_norms(nn.Sequential(nn.BatchNorm2d(4)), torch.Generator())
        >>> bool(model[0].running_var.min() >= 0.5)
        True
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, types):
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
            if isinstance(m, nn.BatchNorm2d) and isinstance(m, types):
                m.running_mean.normal_(0, 0.5, generator=gen)
                m.running_var.uniform_(0.5, 2.0, generator=gen)
    return model


def config_types(node) -> list:
    """Every ``type`` a config writes (None for a dict without one)."""
    if isinstance(node, dict):
        return [node.get('type'), *(t for v in node.values() for t in config_types(v))]
    if isinstance(node, (list, tuple)):
        return [t for v in node for t in config_types(v)]
    return []
