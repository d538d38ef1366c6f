"""Loading mmengine checkpoints with torch >= 2.6.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``. mmengine 0.10.7 predates
that and calls ``torch.load(filename)`` for local files, while the checkpoints its Runner writes
hold a ``message_hub`` with ``HistoryBuffer`` objects and numpy arrays: every ``tools/test.py``,
``--resume`` and ``load_from`` then fails with "Weights only load failed".

:func:`register_trusted_local_loader` (called on ``import mmposenc``) replaces mmengine's loader
for local paths by one that restores the behaviour mmengine was written for
(``weights_only=False``). That unpickles arbitrary objects: load only checkpoints you trust, as
with any OpenMMLab release before torch 2.6. Set ``MMPOSENC_TORCH_WEIGHTS_ONLY=1`` to keep
torch's default instead (plain state dicts still load then; Runner checkpoints do not).
"""
import os
import os.path as osp

import torch


def load_local_checkpoint(filename, map_location=None):
    """Load a local checkpoint file written by mmengine's Runner (or any ``torch.save``).

    Args:
        filename (str): Path of the checkpoint; ``~`` is expanded.
        map_location (str | torch.device, optional): As in :func:`torch.load`.

    Returns:
        dict: The loaded checkpoint.

    Raises:
        FileNotFoundError: ``filename`` is not a file.
    """
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    weights_only = os.environ.get('MMPOSENC_TORCH_WEIGHTS_ONLY', '0') == '1'
    return torch.load(filename, map_location=map_location, weights_only=weights_only)


def register_trusted_local_loader():
    """Make mmengine's ``CheckpointLoader`` use :func:`load_local_checkpoint` for local paths."""
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=load_local_checkpoint, force=True)
