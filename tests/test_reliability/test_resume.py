"""Interrupt a training run, ``--resume`` it, and the losses continue exactly.

The uninterrupted run is the one tests/test_reliability/test_dist_train.py compares with
(:func:`reliability_train_utils.single_run`, trained once for both)."""
import os.path as osp
import shutil

import pytest

from reliability_train_utils import SINGLE_RUN_GROUP, read_scalars, single_run, train

N = 6


@pytest.mark.slow
@pytest.mark.xdist_group(SINGLE_RUN_GROUP)
def test_resume_continues_the_uninterrupted_loss_curve(tmp_path_factory, tmp_path):
    """A run killed after its iteration-N/2 checkpoint leaves that checkpoint and the
    ``last_checkpoint`` file naming it in its work dir (mmengine's CheckpointHook writes both);
    ``tools/train.py --resume`` there trains iterations N/2 + 1 .. N, bit-identical to the
    uninterrupted run (one CPU process, deterministic algorithms, a fresh process)."""
    tmp, _, cfg, full_dir = single_run(tmp_path_factory, N, 4)
    half = full_dir / f'iter_{N // 2}.pth'
    assert osp.isfile(half)
    resumed_dir = tmp_path / 'resumed'
    resumed_dir.mkdir()
    shutil.copy(half, resumed_dir / half.name)
    (resumed_dir / 'last_checkpoint').write_text(str(resumed_dir / half.name))
    train(cfg, resumed_dir, tmp, '--resume')

    full = read_scalars(full_dir)
    resumed = read_scalars(resumed_dir)
    assert sorted(full) == list(range(1, N + 1))
    # it continues at N/2 + 1 (a run that started over would log 1 .. N)
    assert sorted(resumed) == list(range(N // 2 + 1, N + 1))
    assert len(set(full.values())) == N  # the loss moves: equal curves are not trivially equal
    # the model, optimizer, scheduler, data order and RNG all continue: every resumed
    # iteration (its loss is that of the weights after the previous steps) is bit-identical
    for it in range(N // 2 + 1, N + 1):
        assert resumed[it] == full[it], (it, resumed[it], full[it])
    lrs_full, lrs_resumed = read_scalars(full_dir, 'lr'), read_scalars(resumed_dir, 'lr')
    assert lrs_resumed[N // 2 + 1] == lrs_full[N // 2 + 1]
