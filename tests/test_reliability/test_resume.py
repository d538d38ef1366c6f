"""Interrupt a training run, ``--resume`` it, and the losses continue exactly."""
import os.path as osp

import pytest

from reliability_train_utils import read_scalars, train, write_config, write_images

N = 6


@pytest.mark.slow
def test_resume_continues_the_uninterrupted_loss_curve(tmp_path):
    data = write_images(str(tmp_path / 'data'))
    full_cfg = write_config(tmp_path, 'full', data, batch_size=4, max_iters=N,
                            ckpt_interval=N)
    # Same schedule (the LR ramp ends at N), but the run stops at N/2, checkpointing there.
    half_cfg = write_config(tmp_path, 'half', data, batch_size=4, max_iters=N // 2,
                            ckpt_interval=N // 2, sched_end=N)

    train(full_cfg, tmp_path / 'full', tmp_path)
    train(half_cfg, tmp_path / 'resumed', tmp_path)
    assert osp.isfile(tmp_path / 'resumed' / f'iter_{N // 2}.pth')
    before = read_scalars(tmp_path / 'resumed')
    assert sorted(before) == list(range(1, N // 2 + 1))
    train(full_cfg, tmp_path / 'resumed', tmp_path, '--resume')

    full = read_scalars(tmp_path / 'full')
    resumed = read_scalars(tmp_path / 'resumed')
    assert sorted(full) == sorted(resumed) == list(range(1, N + 1))
    assert len(set(full.values())) == N  # the loss moves: equal curves are not trivially equal
    # iterations up to N/2 come from the interrupted run, the rest from the resumed one;
    # on one CPU process with deterministic algorithms they are bit-identical.
    for it in (N // 2, N // 2 + 1, N):
        assert resumed[it] == full[it], (it, resumed[it], full[it])
    lrs_full, lrs_resumed = read_scalars(tmp_path / 'full', 'lr'), read_scalars(
        tmp_path / 'resumed', 'lr')
    assert lrs_resumed[N // 2 + 1] == lrs_full[N // 2 + 1]
