"""``init_weights`` without mmengine's per-parameter INFO lines on the console."""
import contextlib
import logging


@contextlib.contextmanager
def init_info_silenced(level=logging.WARNING):
    """Raise the current ``MMLogger``'s level to ``level`` inside the block, then restore it.

    Args:
        level (int): The level inside the block. Defaults to ``logging.WARNING``.

    Examples:
        >>> import torch.nn as nn
        >>> from mmengine.model import BaseModule
        >>> class Net(BaseModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = nn.Linear(2, 2)
        >>> with init_info_silenced():
        ...     Net().init_weights()  # nothing printed
    """
    from mmengine.logging import MMLogger
    logger = MMLogger.get_current_instance()
    old = logger.level
    logger.setLevel(max(level, old))
    try:
        yield
    finally:
        logger.setLevel(old)


def init_weights_quietly(model):
    """``model.init_weights()`` inside :func:`init_info_silenced`; returns ``model``."""
    with init_info_silenced():
        model.init_weights()
    return model
