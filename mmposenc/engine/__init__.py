from .checkpoint import (CheckpointMismatchError, InvalidCheckpointError, UnsafeCheckpointError,
                         allowlisted, check_checkpoint_file, describe_mismatch,
                         load_local_checkpoint, load_model_zoo_checkpoint,
                         load_remote_checkpoint, register_safe_loaders, safe_globals,
                         state_dict_mismatch)
from .optim_constructor import SummaryOptimWrapperConstructor
from .optim_wrapper import BF16OptimWrapper, amp_optim_wrapper_type
from .quiet_init import init_info_silenced, init_weights_quietly

__all__ = [
    'BF16OptimWrapper', 'CheckpointMismatchError', 'InvalidCheckpointError',
    'SummaryOptimWrapperConstructor', 'UnsafeCheckpointError', 'allowlisted',
    'amp_optim_wrapper_type', 'check_checkpoint_file', 'describe_mismatch', 'init_info_silenced',
    'init_weights_quietly', 'load_local_checkpoint', 'load_model_zoo_checkpoint',
    'load_remote_checkpoint', 'register_safe_loaders', 'safe_globals', 'state_dict_mismatch'
]
