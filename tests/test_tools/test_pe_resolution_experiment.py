"""projects/pe_zoo_resolution/pe_resolution_experiment.py on synthetic idx files (no
Fashion-MNIST): its ``main`` with a command line (``python -m``), in this process
(tests/forked_runs.py's run_in_process: torch's threads and random state restored)."""
import gzip
import json

import numpy as np
import pytest
from forked_runs import run_in_process
from tool_files import load_project

STUDY = 'pe_zoo_resolution.pe_resolution_experiment'
#: ``python -m projects.<STUDY> ARGS`` (the arguments: the run's argv)
# the fork has the module imported already (this file loads it): run it as __main__ afresh
RUN_STUDY = (f"import runpy, sys; sys.modules.pop('projects.{STUDY}', None); "
             f"runpy.run_module('projects.{STUDY}', run_name='__main__')")


def write_idx(path, array):
    header = bytes([0, 0, 8, array.ndim]) + b''.join(
        int(s).to_bytes(4, 'big') for s in array.shape)
    with gzip.open(path, 'wb') as f:
        f.write(header + array.astype(np.uint8).tobytes())


@pytest.mark.slow  # trains two tiny PEViTs (the script's main in this process)
def test_idx_reader_and_tiny_run(tmp_path):
    rng = np.random.RandomState(0)
    root = tmp_path / 'fmnist'
    root.mkdir()
    for prefix, n in (('train', 60), ('t10k', 30)):
        labels = np.arange(n) % 10
        images = rng.randint(0, 50, (n, 28, 28))
        images[:, :14] += (labels * 20)[:, None, None]  # learnable signal
        write_idx(root / f'{prefix}-images-idx3-ubyte.gz', images)
        write_idx(root / f'{prefix}-labels-idx1-ubyte.gz', labels)

    exp = load_project(STUDY)
    images, labels = exp.load_split(str(root), 'train')
    assert images.shape == (60, 28, 28) and labels.tolist()[:3] == [0, 1, 2]
    x, y = exp.subsample(images, labels, 20, seed=0)
    assert x.shape == (20, 1, 28, 28) and np.bincount(y.numpy()).tolist() == [2] * 10

    out = tmp_path / 'out'
    res = run_in_process(dict(code=RUN_STUDY, argv=[
        '--data-root', str(root), '--out-dir', str(out),
        '--encodings', 'none', 'cape', '--train-size', '40', '--test-size', '20',
        '--epochs', '1', '--batch-size', '20', '--eval-res', '20', '36', '--embed-dims',
        '16', '--depth', '1', '--heads', '2', '--threads', '1'], cwd=str(tmp_path)))
    assert res.returncode == 0, res.stderr[-3000:]
    table = (out / 'resolution_experiment.md').read_text()
    assert '| none |' in table and '| cape |' in table and '28px (7x7) *train*' in table
    assert (out / 'resolution_experiment.png').stat().st_size > 1000
    results = json.loads((out / 'resolution_experiment.json').read_text())['results']
    assert set(results) == {'none', 'cape'}
    assert all(0 <= a <= 100 for r in results.values() for a in r['acc'].values())
