"""The cache key and CUDA architectures of a compiled mmcv (``make setup ROUTE=compiled``).

``tools/setup_env.sh`` builds mmcv's ops once per key and caches the wheel. A CUDA build names
its architectures explicitly (``TORCH_CUDA_ARCH_LIST``: the user's, else those of the GPUs in
sight) and the key holds them, so a wheel built on one GPU model is never installed for
another that it does not cover.

Usage (run with the environment's python)::

    python tools/misc/mmcv_build.py key       # prints: <key> <tab> <arch list or 'cpu'>
    python tools/misc/mmcv_build.py covers ARCHES  # exit 0 if ARCHES run on every visible GPU

Both exit with status 2 and one line on stderr when the build cannot be made or used.
"""
import os
import shutil
import sys


class SetupError(RuntimeError):
    """What stops a compiled build, in one line."""


def parse_arches(text):
    """``'8.0;9.0+PTX'`` -> ``[(8, 0, False), (9, 0, True)]`` (sorted, without repeats)."""
    arches = set()
    for item in text.replace(',', ';').replace(' ', ';').split(';'):
        item = item.strip()
        if not item:
            continue
        ptx = item.endswith('+PTX')
        major, _, minor = item[:-4 if ptx else None].partition('.')
        try:
            arches.add((int(major), int(minor or 0), ptx))
        except ValueError:
            raise SetupError(f'TORCH_CUDA_ARCH_LIST: {item!r} is not an architecture such as '
                             '"8.0" or "9.0+PTX"') from None
    return sorted(arches)


def format_arches(arches):
    return ';'.join(f'{a}.{b}' + ('+PTX' if ptx else '') for a, b, ptx in arches)


def covers(arches, capability):
    """Whether code built for ``arches`` runs on a GPU of ``capability`` (major, minor): a
    binary for X.Y runs on X.Z with Z >= Y; PTX for X.Y on any later GPU."""
    major, minor = capability
    return any((a == major and b <= minor) or (ptx and (a, b) <= (major, minor))
               for a, b, ptx in arches)


def visible_capabilities(torch):
    if not torch.cuda.is_available():
        return []
    return sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})


def cuda_build(torch, environ):
    """Whether the build compiles CUDA ops (a CUDA torch and a GPU in sight, or FORCE_CUDA=1)."""
    return bool(torch.version.cuda) and (torch.cuda.is_available()
                                         or environ.get('FORCE_CUDA') == '1')


def find_nvcc(environ):
    home = environ.get('CUDA_HOME') or environ.get('CUDA_PATH')
    if home and os.path.isfile(os.path.join(home, 'bin', 'nvcc')):
        return os.path.join(home, 'bin', 'nvcc')
    return shutil.which('nvcc', path=environ.get('PATH'))


def arch_list(torch, environ):
    """The architectures of a CUDA build: ``TORCH_CUDA_ARCH_LIST`` if set, else the visible
    GPUs'."""
    if environ.get('TORCH_CUDA_ARCH_LIST'):
        return parse_arches(environ['TORCH_CUDA_ARCH_LIST'])
    caps = visible_capabilities(torch)
    if not caps:
        raise SetupError('FORCE_CUDA=1 without a visible GPU: set TORCH_CUDA_ARCH_LIST (for '
                         'example "8.0;9.0") to the GPUs the build is for')
    return [(a, b, False) for a, b in caps]


def build_key(torch, environ=None):
    """``(cache key, arch list or 'cpu')`` of a compiled mmcv for this torch.

    Raises:
        SetupError: A CUDA build without ``nvcc``, or with FORCE_CUDA=1 and no architectures.
    """
    environ = os.environ if environ is None else environ
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    base = (f'torch-{torch.__version__}-cp{sys.version_info[0]}{sys.version_info[1]}'
            f'-cxx11abi{abi}')
    if not cuda_build(torch, environ):
        return f'{base}-cpu', 'cpu'
    if find_nvcc(environ) is None:
        raise SetupError(
            f'ROUTE=compiled with a GPU needs the CUDA {torch.version.cuda} toolkit (nvcc), and '
            'none is on PATH or in CUDA_HOME: install it, or take the ops-free route (make '
            'setup), which needs none')
    arches = arch_list(torch, environ)
    tag = '-'.join(f'sm{a}{b}' + ('ptx' if ptx else '') for a, b, ptx in arches)
    return f'{base}-cu{torch.version.cuda.replace(".", "")}-{tag}', format_arches(arches)


def check_covers(torch, arches_text):
    """Raise SetupError naming each visible GPU that ``arches_text`` does not cover."""
    if arches_text == 'cpu':
        if visible_capabilities(torch):
            raise SetupError('the cached mmcv was built without CUDA ops and a GPU is in sight: '
                             'rebuild it (make setup ROUTE=compiled, with nvcc)')
        return
    arches = parse_arches(arches_text)
    missing = [c for c in visible_capabilities(torch) if not covers(arches, c)]
    if missing:
        raise SetupError(
            f'mmcv was built for CUDA architectures {arches_text}, which do not cover the GPU '
            f'(s) here ({", ".join(f"{a}.{b}" for a, b in missing)}): refused; rebuild with '
            'TORCH_CUDA_ARCH_LIST naming them')


def main(argv=None):
    import torch
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ['key'] and len(argv) == 1:
            key, arches = build_key(torch)
            print(f'{key}\t{arches}')
        elif argv[:1] == ['covers'] and len(argv) == 2:
            check_covers(torch, argv[1])
        else:
            print(__doc__.split('Usage')[1], file=sys.stderr)
            return 2
    except SetupError as exc:
        print(f'mmcv_build: {exc}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
