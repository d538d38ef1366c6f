from .optim_wrapper import BF16OptimWrapper, amp_optim_wrapper_type

__all__ = ['BF16OptimWrapper', 'amp_optim_wrapper_type']
