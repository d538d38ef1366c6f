"""Interrupt a training run, ``--resume`` it, and the losses continue exactly.

The uninterrupted run is the one tests/test_reliability/test_dist_train.py compares with;
it and the resumed run are :func:`reliability_train_utils.single_run`'s (trained once for both
modules, in fresh processes forked from one interpreter)."""
import os.path as osp

import pytest

from reliability_train_utils import SINGLE_RUN_GROUP, read_scalars, single_run

N = 6


@pytest.mark.slow
@pytest.mark.xdist_group(SINGLE_RUN_GROUP)
def test_resume_continues_the_uninterrupted_loss_curve(tmp_path_factory, tmp_path):
    """A run killed after its iteration-N/2 checkpoint leaves that checkpoint and the
    ``last_checkpoint`` file naming it in its work dir (mmengine's CheckpointHook writes both);
    ``tools/train.py --resume`` there trains iterations N/2 + 1 .. N, bit-identical to the
    uninterrupted run (one CPU process, deterministic algorithms, a fresh process). The
    resumed work dir holds the half-way checkpoint (a link to the uninterrupted run's) and a
    last_checkpoint naming it, as the killed run left them."""
    _, _, _, full_dir, resumed_dir = single_run(tmp_path_factory, N, 4)
    assert osp.isfile(full_dir / f'iter_{N // 2}.pth')

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
