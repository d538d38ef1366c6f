"""Safe loading of local checkpoints (``import mmposenc`` registers it for mmengine).

mmengine 0.10.7 calls ``torch.load(filename)`` for local files. Under torch >= 2.6 that is
``weights_only=True``, which refuses the checkpoints mmengine's own Runner writes: their
``message_hub`` holds :class:`~mmengine.logging.HistoryBuffer` objects (numpy arrays, and the
buffer's statistics methods pickled as ``getattr(HistoryBuffer, 'mean')``), and metrics are
numpy scalars. :func:`load_local_checkpoint` keeps ``weights_only=True`` and allows, only for
the duration of its own ``torch.load`` (``torch.serialization.safe_globals``, nothing
process-wide), the smallest set of globals those files need (:func:`safe_globals`):

- ``mmengine.logging.history_buffer.HistoryBuffer``;
- ``builtins.getattr`` restricted to the statistics methods of ``HistoryBuffer`` (any other
  ``getattr`` in a file is refused);
- numpy's array and scalar reconstruction (``numpy.core.multiarray._reconstruct`` and
  ``scalar``, ``numpy.ndarray``, ``numpy.dtype``) and the dtype classes of bool, integer and
  floating dtypes (no object dtype).

With those, every checkpoint our tools write loads: mmengine Runner checkpoints (``iter_*.pth``,
``best_*.pth``, ``--resume``), plain state dicts and the outputs of
``tools/model_converters``. A file that names any other global (a pickle that would run code on
load) is refused with :class:`UnsafeCheckpointError`, which names the globals. To load such a
file you trust, opt in explicitly: ``MMPOSENC_UNSAFE_LOAD=1`` (environment) makes this loader
call ``torch.load(weights_only=False)``. A file that is not a checkpoint at all (text, an
empty or truncated file) raises :class:`InvalidCheckpointError`.
"""
import logging
import os
import os.path as osp
import pickle
import re
import zipfile

import numpy as np
import torch

#: Environment variable: ``1`` loads local checkpoints with ``weights_only=False``.
UNSAFE_LOAD_ENV = 'MMPOSENC_UNSAFE_LOAD'

_ZIP_MAGIC = b'PK\x03\x04'


class InvalidCheckpointError(ValueError):
    """The file is not a PyTorch checkpoint (text, empty, truncated, another archive)."""


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint names globals outside :func:`safe_globals`; loading it could run code."""


class CheckpointMismatchError(RuntimeError):
    """The checkpoint's weights do not fit the model (missing, unexpected or resized keys)."""


def unsafe_load_enabled():
    """Whether the user opted into ``weights_only=False`` (``MMPOSENC_UNSAFE_LOAD=1``)."""
    return os.environ.get(UNSAFE_LOAD_ENV, '0') == '1'


def _history_buffer_method(obj, name):
    """``builtins.getattr`` as Runner checkpoints use it, and nothing else.

    ``HistoryBuffer.__getstate__`` stores its statistics methods (``min``, ``max``,
    ``current``, ``mean``, ...), which pickle as ``getattr(HistoryBuffer, 'mean')``.
    """
    from mmengine.logging import HistoryBuffer
    allowed = {'min', 'max', 'current', 'mean'} | set(HistoryBuffer._statistics_methods)
    if obj is not HistoryBuffer or not isinstance(name, str) or name not in allowed or \
            not callable(getattr(HistoryBuffer, name, None)):
        raise pickle.UnpicklingError(
            f'refusing getattr({getattr(obj, "__name__", type(obj).__name__)}, {name!r}): '
            'safe loading allows getattr only for the statistics methods of HistoryBuffer')
    return getattr(HistoryBuffer, name)


def _numpy_globals():
    """numpy's array/scalar reconstruction under the names numpy 1.x and 2.x pickle them."""
    if int(np.__version__.split('.')[0]) >= 2:
        from numpy._core import multiarray
    else:
        from numpy.core import multiarray
    reconstruct, scalar = multiarray._reconstruct, multiarray.scalar
    out = [np.ndarray, np.dtype]
    for module in ('numpy.core.multiarray', 'numpy._core.multiarray'):
        out += [(reconstruct, f'{module}._reconstruct'), (scalar, f'{module}.scalar')]
    dtypes = getattr(np, 'dtypes', None)  # numpy >= 1.25 pickles dtypes with their class
    if dtypes is not None:
        for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64):
            out.append(type(np.dtype(t)))
    return out


def safe_globals():
    """The globals :func:`load_local_checkpoint` allows beyond torch's own safe set.

    Returns:
        list: Entries for :func:`torch.serialization.safe_globals` (callables or
        ``(callable, name)`` pairs).
    """
    from mmengine.logging import HistoryBuffer
    return [HistoryBuffer, (_history_buffer_method, 'builtins.getattr')] + _numpy_globals()


def _allowed_names(extra=()):
    names = set()
    for entry in safe_globals() + list(extra):
        if isinstance(entry, tuple):
            names.add(entry[1])
        else:
            names.add(f'{entry.__module__}.{entry.__qualname__}')
    return names


def check_checkpoint_file(filename):
    """Check, from its first bytes, that ``filename`` can be a ``torch.save`` file.

    Args:
        filename (str): Path of the checkpoint.

    Returns:
        str: ``'zip'`` (torch >= 1.6 format) or ``'legacy'`` (a pickle).

    Raises:
        FileNotFoundError: ``filename`` is not a file.
        InvalidCheckpointError: empty, text, a damaged zip archive, ...
    """
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    with open(filename, 'rb') as f:
        head = f.read(8)
    if not head:
        raise InvalidCheckpointError(f'{filename} is not a PyTorch checkpoint: the file is empty')
    if head.startswith(_ZIP_MAGIC):
        if not zipfile.is_zipfile(filename):
            raise InvalidCheckpointError(
                f'{filename} is not a PyTorch checkpoint: a truncated or damaged zip archive')
        return 'zip'
    if head[0] == 0x80 and 2 <= head[1] <= 5:  # a pickle (torch.save's legacy format)
        return 'legacy'
    raise InvalidCheckpointError(
        f'{filename} is not a PyTorch checkpoint: it starts with {head!r}, neither a '
        "torch.save zip archive (b'PK\\x03\\x04') nor a legacy torch.save pickle")


_REFUSAL_RE = re.compile(r'(Trying to load unsupported GLOBAL [^\n]*|Unsupported global: '
                         r'GLOBAL [^\n]*|Can only build [^\n]*|Trying to call reduce for '
                         r'unrecognized function [^\n]*|refusing getattr[^\n]*)')


def _unsafe_names(filename, fmt, extra=()):
    """The globals of a zip checkpoint outside the allowlist, sorted (a static scan; empty for
    a legacy pickle or when the scan fails)."""
    if fmt != 'zip':
        return []
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(filename)
    except Exception:
        return []
    return sorted(set(found) - _allowed_names(extra))


def _refusal(filename, names, err):
    """:class:`UnsafeCheckpointError` naming the globals ``names`` we do not allow."""
    reason = _REFUSAL_RE.search(str(err))
    what = (f'it names globals outside the safe allowlist: {", ".join(names)}' if names else
            'it holds objects outside the safe allowlist')
    if reason:
        what += f' (torch: {reason.group(1).rstrip(". ")})'
    return UnsafeCheckpointError(
        f'refusing to load {filename}: {what}; unpickling them can run arbitrary code. If you '
        f'trust the file, set {UNSAFE_LOAD_ENV}=1 to load it with torch.load('
        'weights_only=False) (see mmposenc/engine/checkpoint.py)')


def load_local_checkpoint(filename, map_location=None, extra_safe_globals=()):
    """Load a local checkpoint with ``weights_only=True`` and the allowlist :func:`safe_globals`.

    Args:
        filename (str): Path of the checkpoint; ``~`` is expanded.
        map_location (str | torch.device, optional): As in :func:`torch.load`.
        extra_safe_globals (Sequence): More globals to allow for this file only (a
            converter of another codebase's checkpoints, e.g. ``argparse.Namespace``).

    Returns:
        dict: The loaded checkpoint.

    Raises:
        FileNotFoundError: ``filename`` is not a file.
        InvalidCheckpointError: the file is not a PyTorch checkpoint.
        UnsafeCheckpointError: the file needs globals outside the allowlist (and
            ``MMPOSENC_UNSAFE_LOAD=1`` is not set).

    Examples:
        >>> import torch
        >>> torch.save({'state_dict': {'w': torch.ones(2)}}, '/tmp/ckpt.pth')
        >>> load_local_checkpoint('/tmp/ckpt.pth')['state_dict']['w']
        tensor([1., 1.])
    """
    filename = osp.expanduser(filename)
    fmt = check_checkpoint_file(filename)
    if unsafe_load_enabled():
        from mmengine.logging import print_log
        print_log(f'{UNSAFE_LOAD_ENV}=1: loading {filename} with torch.load(weights_only=False)',
                  logger='current', level=logging.WARNING)
        return torch.load(filename, map_location=map_location, weights_only=False)
    try:
        with torch.serialization.safe_globals(safe_globals() + list(extra_safe_globals)):
            return torch.load(filename, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        names = _unsafe_names(filename, fmt, extra_safe_globals)
        if _REFUSAL_RE.search(str(err)) or 'Weights only load failed' in str(err) and names:
            raise _refusal(filename, names, err) from None
        raise InvalidCheckpointError(
            f'{filename} is not a readable PyTorch checkpoint: {_last_line(err)}') from None
    except (EOFError, KeyError, zipfile.BadZipFile) as err:
        raise InvalidCheckpointError(
            f'{filename} is not a readable PyTorch checkpoint ({type(err).__name__}: '
            f'{err})') from None
    except RuntimeError as err:
        if any(s in str(err) for s in ('PytorchStreamReader', 'inline_container', 'zip archive')):
            raise InvalidCheckpointError(
                f'{filename} is not a readable PyTorch checkpoint: {_last_line(err)}') from None
        raise


def _last_line(err):
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith('Check the documentation')]
    return lines[-1] if lines else type(err).__name__


def register_local_loader():
    """Make mmengine's ``CheckpointLoader`` use :func:`load_local_checkpoint` for local paths."""
    from mmengine.runner.checkpoint import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes='', loader=load_local_checkpoint, force=True)


def _preview(keys, n=3):
    keys = sorted(keys)
    return ', '.join(keys[:n]) + (f', ... ({len(keys) - n} more)' if len(keys) > n else '')


def state_dict_mismatch(model, checkpoint, revise_keys=((r'^module\.', ''), )):
    """What a non-strict ``load_state_dict`` of ``checkpoint`` into ``model`` would skip.

    The checkpoint's state dict is found as mmengine finds it (``checkpoint['state_dict']``
    or the checkpoint itself, keys revised by ``revise_keys``).

    Args:
        model (nn.Module): The (unwrapped) model.
        checkpoint (dict): A loaded checkpoint or state dict.
        revise_keys (Sequence[tuple]): ``(pattern, replacement)`` applied to the keys.

    The model's load-state-dict pre-hooks run first on a copy of the state dict, as they run
    when mmengine loads it (e.g. CPVT resizes a position embedding of another image size), so
    what they adapt counts as fitting.

    Returns:
        dict: ``missing`` (model keys the checkpoint lacks, BN ``num_batches_tracked``
        excepted), ``unexpected`` (checkpoint keys the model lacks) and ``shape``
        (``key -> (checkpoint shape, model shape)``).
    """
    source = checkpoint.get('state_dict', checkpoint)
    metadata = getattr(source, '_metadata', None) or {}
    state = dict(source)
    for pattern, repl in revise_keys:
        state = {re.sub(pattern, repl, k): v for k, v in state.items()}
    state.pop('_metadata', None)
    _run_load_pre_hooks(model, state, metadata)
    own = model.state_dict()
    shape = {k: (tuple(state[k].shape), tuple(v.shape)) for k, v in own.items()
             if k in state and hasattr(state[k], 'shape') and state[k].shape != v.shape}
    return dict(
        missing=[k for k in own if k not in state and not k.endswith('num_batches_tracked')],
        unexpected=[k for k in state if k not in own], shape=shape)


def _run_load_pre_hooks(model, state, metadata):
    """Run every module's load-state-dict pre-hooks on ``state`` (in place), parents first,
    as ``load_state_dict`` runs them (non-strict; what they report is dropped)."""
    missing, unexpected, errors = [], [], []
    for name, module in model.named_modules():
        hooks = getattr(module, '_load_state_dict_pre_hooks', None)
        if not hooks:
            continue
        prefix = f'{name}.' if name else ''
        for hook in list(hooks.values()):
            hook(state, prefix, metadata.get(name, {}), False, missing, unexpected, errors)


def describe_mismatch(mismatch):
    """One line summarising :func:`state_dict_mismatch` (``''`` when the weights fit)."""
    parts = []
    if mismatch['missing']:
        parts.append(f'{len(mismatch["missing"])} missing keys ({_preview(mismatch["missing"])})')
    if mismatch['unexpected']:
        parts.append(f'{len(mismatch["unexpected"])} unexpected keys '
                     f'({_preview(mismatch["unexpected"])})')
    if mismatch['shape']:
        k = sorted(mismatch['shape'])[0]
        ckpt_shape, model_shape = mismatch['shape'][k]
        parts.append(f'{len(mismatch["shape"])} keys of another shape ({k}: checkpoint '
                     f'{ckpt_shape}, model {model_shape}' +
                     (', ...)' if len(mismatch['shape']) > 1 else ')'))
    return ', '.join(parts)
