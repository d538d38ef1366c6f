"""projects/*: the CPU-scale reproduction studies of docs/reproductions.md.

Each study's ``--quick`` mode runs end to end in-process on synthetic idx files (no
Fashion-MNIST needed): every variant trains, the run files, the table and the PNG appear;
plus the shared pieces (augmentation, statistics, resume) on their own.
"""
import gzip
import json
import os.path as osp
import subprocess

import numpy as np
import pytest
import torch

from tool_files import load_project

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _import(name):
    """The shared study library (``fmnist_study``) or a study's driver, from projects/."""
    return load_project('common.fmnist_study' if name == 'fmnist_study' else f'{name}.{name}')


def _write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b''.join(
        int(s).to_bytes(4, 'big') for s in array.shape)
    with gzip.open(path, 'wb') as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.fixture(scope='module')
def fake_fmnist(tmp_path_factory):
    """Fashion-MNIST-shaped idx files with a learnable signal (60 train, 40 test)."""
    root = tmp_path_factory.mktemp('fmnist')
    rng = np.random.RandomState(0)
    for prefix, n in (('train', 60), ('t10k', 40)):
        labels = np.arange(n) % 10
        images = rng.randint(0, 50, (n, 28, 28))
        images[:, :14] += (labels * 20)[:, None, None]
        _write_idx(str(root / f'{prefix}-images-idx3-ubyte.gz'), images)
        _write_idx(str(root / f'{prefix}-labels-idx1-ubyte.gz'), labels)
    return str(root)


def test_random_resized_crop_identity_and_flip():
    fs = _import('fmnist_study')
    x = torch.rand(3, 1, 28, 28)
    g = torch.Generator().manual_seed(0)
    same = fs.random_resized_crop(x, g, scale=(1, 1), ratio=(1, 1), flip=False)
    torch.testing.assert_close(same, x, atol=1e-5, rtol=0)
    # full-area crops with flips: every image is either itself or its mirror image
    out = fs.random_resized_crop(x, torch.Generator().manual_seed(1), scale=(1, 1),
                                 ratio=(1, 1), flip=True)
    for o, i in zip(out, x):
        assert torch.allclose(o, i, atol=1e-5) or torch.allclose(o, i.flip(-1), atol=1e-5)
    crop = fs.random_resized_crop(x, g)  # default: zoomed-in crops, same size
    assert crop.shape == x.shape and not torch.allclose(crop, x)


def test_resize_is_whole_image():
    fs = _import('fmnist_study')
    x = torch.zeros(1, 1, 28, 28)
    x[..., :, :14] = 1.  # left half bright
    for res in (20, 44):
        y = fs.resize(x, res)
        assert y.shape[-1] == res
        # the whole image is kept: the bright half stays the left half at every size
        assert y[..., :, :res // 2 - 1].min() > 0.9 and y[..., :, res // 2 + 1:].max() < 0.1


def test_statistics_and_paired_differences():
    fs = _import('fmnist_study')
    m, s = fs.mean_std([1., 2., 3.])
    assert m == 2. and s == pytest.approx(1.)  # sample std (ddof 1)
    rec = lambda seed, a: dict(seed=seed, acc={28: a, 20: a - 10}, settings=dict(train_res=28))
    runs = dict(a=[rec(0, 70.), rec(1, 72.), rec(2, 71.)],
                b=[rec(0, 68.), rec(1, 71.), rec(3, 50.)])
    assert fs.paired(runs, 'a', 'b', 28) == [2., 1.]  # common seeds 0 and 1 only
    assert fs.metric(runs['a'][0], 'off') == 60.
    assert fs.verdict([2., 1.5, 2.5], +0.4) == 'holds'
    assert fs.verdict([-2., -1.5, -2.5], +0.4) == 'reversed'
    assert fs.verdict([2., -1.5, 2.5], +0.4) == 'unclear'  # seeds disagree
    assert fs.verdict([1., 1.5, 2.], -1.) == 'reversed'
    assert fs.verdict([0.1, 5., 0.1], 1.) == 'unclear'  # mean within 2 standard errors


@pytest.mark.parametrize('script', [
    'resolution_generalization', 'cpvt_ablations', 'sape2_ordering', 'pervit_phi_p'])
def test_study_quick_mode_end_to_end(tmp_path, fake_fmnist, script):
    mod = _import(script)
    out = tmp_path / script
    argv = ['--quick', '--data-root', fake_fmnist, '--out-dir', str(out)]
    runs = mod.main(argv)
    all_variants = list(getattr(mod, 'ENCODINGS', None) or mod.VARIANTS)
    assert list(runs) == all_variants
    assert all(len(r) == 2 for r in runs.values())  # --quick: two seeds
    rec = json.loads((out / 'runs' / f'{all_variants[0]}__seed1.json').read_text())
    assert rec['seed'] == 1 and all(0 <= a <= 100 for a in rec['acc'].values())
    assert rec['train_cpu_s'] > 0 and 'loadavg_1m_start' in rec
    # the code that produced the run (docs/reproductions.md cites it per table)
    head = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:
        assert rec['code']['commit'] == head.stdout.strip()
        assert isinstance(rec['code']['uncommitted_changes'], bool)
    if script == 'pervit_phi_p':  # "fixed": Phi_p's parameters are not trained
        fixed = json.loads((out / 'runs' / 'peripheral-fixed__seed0.json').read_text())
        trained = json.loads((out / 'runs' / 'peripheral-trained__seed0.json').read_text())
        assert fixed['params'] == trained['params'] > fixed['trainable_params']
    md = next(out.glob('*.md')).read_text()
    assert '±' in md and 'runs' in md
    assert next(out.glob('*.png')).stat().st_size > 1000
    # a second call finds every run stored and trains nothing
    before = {p.name: p.stat().st_mtime_ns for p in (out / 'runs').iterdir()}
    mod.main(argv)
    assert before == {p.name: p.stat().st_mtime_ns for p in (out / 'runs').iterdir()}
