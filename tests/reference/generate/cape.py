"""Fixtures of CAPE from gcambara/cape (``cape/cape.py``: ``CAPE1d``, ``CAPE2d``), for
``tests/test_reference/test_parity_cape.py``.

``compute_pos_emb`` (the embedding alone; ``forward`` adds it to ``x * sqrt(d)``) with
``batch_first=True``:

- CAPE1d: lengths 9 and 16 (a batch of two, the second padded through ``x_lengths``),
  ``normalize`` off and on, ``positions_delta`` 1 and 0.5, ``freq_scale`` 1 and 2; eval, and
  training with global shift, local shift and global scaling after ``torch.manual_seed``.
- CAPE2d: ``patches`` of shape (B, X, Y, C) for the grids (H, W) = 4x4, 3x5, 6x5 with
  X = W (their x runs along the columns) and Y = H; the buffers ``w_x`` / ``w_y``; eval, and
  training with global shift and global scaling after ``torch.manual_seed``. Not the local
  shift: its per-token draws fill (B, X, Y), i.e. column-major on our row-major grid, and
  its bound is ``2 s / (N - 1)`` per axis, so no seed gives both modules the same draws.

Usage::

    python tests/reference/generate/cape.py --src /path/to/cape [--commit SHA]
"""
import os.path as osp
import sys

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from _common import GRIDS, parse_args, save  # noqa: E402

REPO = 'gcambara/cape'
C = 12
CONFIGS_1D = dict(
    plain=dict(),
    normalize=dict(normalize=True),
    delta=dict(normalize=True, positions_delta=0.5, freq_scale=2.),
    train=dict(normalize=True, max_global_shift=2., max_local_shift=0.5,
               max_global_scaling=1.5),
    train_delta=dict(normalize=True, positions_delta=0.5, max_global_shift=2.,
                     max_local_shift=0.5, max_global_scaling=1.5),
)
CONFIGS_2D = dict(
    eval=dict(),
    train_global=dict(max_global_shift=0.5, max_global_scaling=1.4),
)


def main():
    args = parse_args(__doc__.splitlines()[0], REPO)
    from cape import CAPE1d, CAPE2d

    cases = []
    for ci, (cname, cfg) in enumerate(CONFIGS_1D.items()):
        cfg = dict(cfg)
        delta = cfg.pop('positions_delta', None)
        training = 'max_global_shift' in cfg
        for T in (9, 16):
            for padded in (False, True):
                mod = CAPE1d(C, batch_first=True, **cfg).train(training)
                x = torch.zeros(2, T, C)
                lengths = torch.tensor([T, T - 3]) if padded else None
                seed = 100 * ci + T + padded
                torch.manual_seed(seed)
                emb = mod.compute_pos_emb(x, x_lengths=lengths, positions_delta=delta)
                cases.append(dict(name=f'1d/{cname}/T{T}' + ('/padded' if padded else ''),
                                  dim=1, config=cname, training=training, T=T,
                                  x_lengths=lengths, positions_delta=delta, seed=seed,
                                  freq=mod.freq, emb=emb))
    for ci, (cname, cfg) in enumerate(CONFIGS_2D.items()):
        training = cname != 'eval'
        for gname, (H, W) in GRIDS.items():
            mod = CAPE2d(C, batch_first=True, **cfg).train(training)
            seed = 1000 + 100 * ci + 10 * H + W
            torch.manual_seed(seed)
            emb = mod.compute_pos_emb(torch.zeros(2, W, H, C))  # (B, X=W, Y=H, C)
            cases.append(dict(name=f'2d/{cname}/{gname}', dim=2, config=cname,
                              training=training, hw=[H, W], seed=seed, w_x=mod.w_x,
                              w_y=mod.w_y, emb=emb))
    save(args, 'cape', REPO, ['cape/cape.py:CAPE1d.compute_pos_emb',
                              'cape/cape.py:CAPE2d.compute_pos_emb'], cases,
         extra=dict(channels=C, configs_1d=CONFIGS_1D, configs_2d=CONFIGS_2D),
         extra_versions=('einops', ))


if __name__ == '__main__':
    main()
