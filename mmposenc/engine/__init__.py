from .checkpoint import load_local_checkpoint, register_trusted_local_loader
from .optim_wrapper import BF16OptimWrapper, amp_optim_wrapper_type

__all__ = [
    'BF16OptimWrapper', 'amp_optim_wrapper_type', 'load_local_checkpoint',
    'register_trusted_local_loader'
]
