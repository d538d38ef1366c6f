"""Safe loading of local checkpoints (``import mmposenc`` registers it for mmengine).

``weights_only=True`` plus the few globals mmengine's Runner checkpoints need; see
docs/user_guides/train_test.md.
"""
import logging
import os
import os.path as osp
import pickle
import re
import threading
import zipfile
from collections import Counter
from contextlib import contextmanager

import numpy as np
import torch

from mmposenc.utils.errors import CheckpointDownloadError, MMPosEncError, one_line

#: The oldest torch with every ``torch.serialization`` API this module uses (setup.py's pin).
MIN_TORCH_VERSION = '2.6'
#: The ``torch.serialization`` functions used here.
TORCH_APIS = ('add_safe_globals', 'get_safe_globals', 'get_unsafe_globals_in_checkpoint',
              'safe_globals')

#: Environment variable: ``1`` loads local checkpoints with ``weights_only=False``.
UNSAFE_LOAD_ENV = 'MMPOSENC_UNSAFE_LOAD'

_ZIP_MAGIC = b'PK\x03\x04'


class InvalidCheckpointError(MMPosEncError, ValueError):
    """The file is not a PyTorch checkpoint (text, empty, truncated, another archive)."""


class UnsafeCheckpointError(MMPosEncError, pickle.UnpicklingError):
    """The checkpoint names globals outside :func:`safe_globals`; loading it could run code."""


class CheckpointNotFoundError(MMPosEncError, FileNotFoundError):
    """No checkpoint file at the path given (named in full)."""


class CheckpointMismatchError(MMPosEncError, RuntimeError):
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


#: Guards :data:`_held`: entries our running loads added to torch's allowlist, with how many
#: of them hold each.
_allowlist_lock = threading.Lock()
_held = Counter()


@contextmanager
def allowlisted(entries):
    """Allow ``entries`` in torch's ``weights_only`` allowlist for the duration of the context,
    leaving it exactly as found.

    Entries torch's allowlist already holds (registered by the user with
    ``torch.serialization.add_safe_globals``) are left alone and stay after the context; the
    others are added, counted across threads, and removed when the last context that added
    them ends. torch's allowlist is process-wide: while the context runs, other threads'
    ``weights_only`` loads see these entries too (see the module doc).

    Args:
        entries (Sequence): Callables or ``(callable, 'module.name')`` pairs.
    """
    mine = []
    with _allowlist_lock:
        present = set(torch.serialization.get_safe_globals())
        for entry in dict.fromkeys(entries):
            if _held[entry] or entry not in present:
                _held[entry] += 1
                mine.append(entry)
        torch.serialization.add_safe_globals([e for e in mine if e not in present])
    try:
        yield
    finally:
        with _allowlist_lock:
            done = []
            for entry in mine:
                _held[entry] -= 1
                if not _held[entry]:
                    del _held[entry]
                    done.append(entry)
            # the exit of torch's own context removes exactly the entries it lists
            torch.serialization.safe_globals(done).__exit__(None, None, None)


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
        CheckpointNotFoundError: ``filename`` is not a file (a ``FileNotFoundError``).
        InvalidCheckpointError: empty, text, a damaged zip archive, ...
    """
    if not osp.isfile(filename):
        raise CheckpointNotFoundError(f'{osp.abspath(filename)} can not be found: no such '
                                      'checkpoint file')
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
        CheckpointNotFoundError: ``filename`` is not a file (a ``FileNotFoundError``).
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
        with allowlisted(safe_globals() + list(extra_safe_globals)):
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


def check_torch_serialization():
    """Raise one clear ImportError when torch lacks an API of :data:`TORCH_APIS` (torch older
    than :data:`MIN_TORCH_VERSION`, which setup.py declares)."""
    missing = [name for name in TORCH_APIS if not hasattr(torch.serialization, name)]
    if missing:
        raise ImportError(
            f'mmposenc needs torch>={MIN_TORCH_VERSION} for safe checkpoint loading '
            f'(torch.serialization.{", ".join(missing)}); found torch {torch.__version__}: '
            f'pip install "torch>={MIN_TORCH_VERSION}"')


def download_failure(url, cached, err, name=None):
    """The one-line message of a failed download of ``url`` (``name``: the model-zoo name the
    config gave, e.g. ``torchvision://resnet50``) to ``cached``: why, and how to do without
    the network."""
    from urllib.error import HTTPError, URLError
    reason = err.reason if isinstance(err, URLError) and not isinstance(err, HTTPError) else err
    what = f'{name} ({url})' if name and name != url else url
    return (f'could not download {what} to {cached}: {type(err).__name__}: {one_line(reason)}. '
            f'Offline, put the file at {cached} (or set TORCH_HOME to a folder whose '
            'hub/checkpoints holds it), or do without these weights: set the init_cfg (or '
            'load_from) that names it to None (e.g. --cfg-options model.backbone.init_cfg=None)')


def _download(url, model_dir=None, progress=False, zoo_name=None):
    """``url`` downloaded as torch.hub / mmengine cache it (``<torch hub dir>/checkpoints/<the
    URL's file name>``, kept and reused) with torch's downloader; the local path. A zip
    archive holding one file (torch.hub's legacy format) is extracted beside it.

    Raises:
        CheckpointDownloadError: the download failed (no network, HTTP error, ...); the
            message names the URL, the local path and what to set offline.
    """
    from urllib.parse import urlparse
    if model_dir is None:
        model_dir = osp.join(torch.hub.get_dir(), 'checkpoints')
    os.makedirs(model_dir, exist_ok=True)
    name = osp.basename(urlparse(url).path)
    if not name:
        raise InvalidCheckpointError(f'{url} names no file to download')
    cached = osp.join(model_dir, name)
    if not osp.exists(cached):
        try:
            torch.hub.download_url_to_file(url, cached, progress=progress)
        except Exception as err:  # URLError, HTTPError, timeouts, a full disk
            raise CheckpointDownloadError(download_failure(url, cached, err, zoo_name)) from err
    if zipfile.is_zipfile(cached):
        with zipfile.ZipFile(cached) as archive:
            members = archive.infolist()
            if len(members) == 1 and not members[0].is_dir():
                inner = members[0].filename
                if osp.isabs(inner) or '..' in inner.replace('\\', '/').split('/'):
                    raise InvalidCheckpointError(f'{url}: refusing to extract {inner!r}')
                archive.extract(members[0], model_dir)
                return osp.join(model_dir, inner)
    return cached


def load_remote_checkpoint(filename, map_location=None, model_dir=None, progress=False,
                           name=None):
    """Download an ``http://`` / ``https://`` checkpoint, then load it as
    :func:`load_local_checkpoint` loads a local file (same allowlist, refusal and opt-in).

    mmengine's own ``load_from_http`` unpickles the download with torch.hub's
    ``weights_only=False``. As there, the file is cached in ``<torch hub dir>/checkpoints``
    and, in a distributed run, rank 0 downloads it before the other ranks look for it.

    Args:
        filename (str): The URL.
        map_location (str | torch.device, optional): As in :func:`torch.load`.
        model_dir (str, optional): Download folder. Defaults to torch.hub's.
        progress (bool): Show a progress bar. Defaults to False.
        name (str, optional): The name the config gave (``torchvision://resnet50``), for the
            message of a failed download. Defaults to None.

    Returns:
        dict: The loaded checkpoint.

    Raises:
        CheckpointDownloadError: the download failed (see :func:`download_failure`).
    """
    from mmengine.dist import get_dist_info
    rank, world_size = get_dist_info()
    path = _download(filename, model_dir, progress, name) if rank == 0 else None
    if world_size > 1:
        torch.distributed.barrier()
        if rank > 0:
            path = _download(filename, model_dir, progress, name)
    return load_local_checkpoint(path, map_location=map_location)


def load_model_zoo_checkpoint(filename, map_location=None):
    """``torchvision://``, ``modelzoo://``, ``open-mmlab://``, ``openmmlab://`` and
    ``mmcls://`` checkpoints, resolved with mmengine's model tables as mmengine resolves them,
    loaded by :func:`load_remote_checkpoint` (or :func:`load_local_checkpoint` for an
    ``open-mmlab://`` entry that names a file in mmengine's home)."""
    from mmengine.runner import checkpoint as mm
    scheme, name = filename.split('://', 1)
    if scheme in ('torchvision', 'modelzoo'):
        url = _model_url(filename, mm.get_torchvision_models(), name)
    elif scheme == 'mmcls':
        return mm._process_mmcls_checkpoint(load_remote_checkpoint(
            _model_url(filename, mm.get_mmcls_models(), name), map_location, name=filename))
    else:
        name = mm.get_deprecated_model_names().get(name, name)
        url = _model_url(filename, mm.get_external_models(), name)
        if not url.startswith(('http://', 'https://')):
            return load_local_checkpoint(osp.join(mm._get_mmengine_home(), url), map_location)
    return load_remote_checkpoint(url, map_location, name=filename)


def _model_url(filename, table, name):
    """``table[name]``, or :class:`CheckpointNotFoundError` naming the closest names."""
    if name in table:
        return table[name]
    import difflib
    close = difflib.get_close_matches(name, list(table), n=3)
    scheme = filename.split('://', 1)[0]
    hint = f'; closest: {", ".join(f"{scheme}://{c}" for c in close)}' if close else ''
    raise CheckpointNotFoundError(f'{filename}: no such name in mmengine\'s model table of '
                                  f'{scheme}://{hint}')


#: mmengine's ``CheckpointLoader`` prefixes our loaders take over ('' = local paths).
SAFE_LOADERS = {
    '': load_local_checkpoint,
    ('http://', 'https://'): load_remote_checkpoint,
    ('torchvision://', 'modelzoo://', 'open-mmlab://', 'openmmlab://', 'mmcls://'):
    load_model_zoo_checkpoint,
}


def register_safe_loaders():
    """Make mmengine's ``CheckpointLoader`` load local paths, URLs and model-zoo names with
    our loaders (:data:`SAFE_LOADERS`; ``pavi://`` and ``s3://`` stay mmengine's)."""
    from mmengine.runner.checkpoint import CheckpointLoader
    check_torch_serialization()
    for prefixes, loader in SAFE_LOADERS.items():
        CheckpointLoader.register_scheme(prefixes=prefixes, loader=loader, force=True)


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
