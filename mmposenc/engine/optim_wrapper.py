"""Mixed precision on machines without CUDA."""
from contextlib import contextmanager

import torch
from mmengine.optim import OptimWrapper

from mmposenc.registry import OPTIM_WRAPPERS


@OPTIM_WRAPPERS.register_module()
class BF16OptimWrapper(OptimWrapper):
    """Optimizer wrapper running forward passes under bfloat16 autocast.

    ``tools/train.py --amp`` picks it where mmengine's ``AmpOptimWrapper`` refuses (no CUDA).

    Args:
        device_type (str): Device type of the autocast region. Defaults to 'cpu'.
        **kwargs: Arguments of :class:`mmengine.optim.OptimWrapper`.

    Examples:
        >>> import torch
        >>> model = torch.nn.Linear(4, 2)
        >>> wrapper = BF16OptimWrapper(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
        >>> with wrapper.optim_context(model):
        ...     print(model(torch.randn(3, 4)).dtype)
        torch.bfloat16
    """

    def __init__(self, device_type='cpu', **kwargs):
        super().__init__(**kwargs)
        self.device_type = device_type

    @contextmanager
    def optim_context(self, model):
        with super().optim_context(model), torch.autocast(
                device_type=self.device_type, dtype=torch.bfloat16):
            yield


def amp_optim_wrapper_type():
    """The optimizer wrapper type that ``--amp`` should use on this machine."""
    if torch.cuda.is_available():
        return 'AmpOptimWrapper'
    return 'mmposenc.BF16OptimWrapper'
