"""What every fixture generator shares: the command line, the provenance record and saving.

A generator runs the official code of one repository (``--src``, a checkout or an exported
tree of it at ``--commit``) and writes float32 fixtures into ``tests/reference/fixtures``:
inputs, the parameters copied between the official module and ours, outputs and gradients.
Nothing of the official code is copied into this repository; only the numbers are, with the
repository, commit, command, date and package versions beside them (``<name>.json`` and
``tests/reference/PROVENANCE.md``).
"""
import argparse
import datetime
import json
import os
import os.path as osp
import platform
import subprocess
import sys

import torch

FIXTURES = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'fixtures')


def parse_args(description, repo):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--src', required=True,
                        help=f'a checkout (or exported tree) of {repo}')
    parser.add_argument('--commit', default=None,
                        help='the commit of --src (read with git when --src is a checkout)')
    parser.add_argument('--out', default=FIXTURES, help='folder of the fixtures')
    args = parser.parse_args()
    args.src = osp.abspath(args.src)
    # this folder's generators are named after the repositories (timm.py, cape.py): off the
    # path, so that ``import timm`` / ``import cape`` find the official code
    here = osp.dirname(osp.abspath(__file__))
    sys.path[:] = [p for p in sys.path if osp.abspath(p or os.getcwd()) != here]
    if args.commit is None:
        try:
            args.commit = subprocess.check_output(['git', '-C', args.src, 'rev-parse', 'HEAD'],
                                                  text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            parser.error('--src is not a git checkout: give its --commit')
    sys.path.insert(0, args.src)
    return args


def versions(*modules):
    out = dict(python=platform.python_version(), torch=str(torch.__version__))
    for name in modules:
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = str(getattr(mod, '__version__', '?'))
    return out


def save(args, name, repo, functions, cases, extra=None, extra_versions=()):
    """Write ``<out>/<name>.pt`` (``dict(meta=..., cases=..., **extra)``) and
    ``<out>/<name>.json``."""
    meta = dict(
        repository=f'https://github.com/{repo}', commit=args.commit,
        functions=list(functions),
        command=' '.join(['python', osp.relpath(sys.argv[0])] +
                         [a for a in sys.argv[1:]]),
        date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d'),
        versions=versions(*extra_versions))
    os.makedirs(args.out, exist_ok=True)
    path = osp.join(args.out, name + '.pt')
    payload = _detach(dict(meta=meta, cases=cases, **(extra or {})))
    # the legacy format: one pickle, no per-tensor zip entries (a third smaller here)
    torch.save(payload, path, _use_new_zipfile_serialization=False)
    meta = dict(meta, file=name + '.pt', bytes=os.path.getsize(path),
                cases=[c['name'] for c in cases])
    with open(osp.join(args.out, name + '.json'), 'w') as f:
        json.dump(meta, f, indent=1)
        f.write('\n')
    print(f'{path}: {len(cases)} cases, {meta["bytes"]} bytes')
    return path


def _detach(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().contiguous().clone()
    if isinstance(obj, dict):
        return {k: _detach(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_detach(v) for v in obj)
    return obj


def probe(shape, seed):
    """The fixed weights ``g`` of the scalar ``(out * g).sum()`` whose gradients the fixtures
    hold: ``cos(0.7 i + seed)`` over the flat index ``i`` (a formula, so not stored; the tests
    use the same one)."""
    n = 1
    for s in shape:
        n *= s
    return torch.cos(0.7 * torch.arange(n, dtype=torch.float64) + seed).float().reshape(shape)


def grad_of(out, wrt, seed):
    """Gradients of ``(out * probe(out.shape, seed)).sum()`` w.r.t. the tensors ``wrt``."""
    return torch.autograd.grad((out * probe(out.shape, seed)).sum(), wrt)


#: the grids of every comparison: square, non-square and larger than the "training" one
GRIDS = dict(square=(4, 4), nonsquare=(3, 5), off_training=(6, 5))
