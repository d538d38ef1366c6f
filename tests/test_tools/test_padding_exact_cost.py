"""tools/benchmark/padding_exact_cost.py as ``python <tool>`` from a folder of the user's: the
bare backbones on a small input (one row per backbone and stage) and ``--configs`` on a shipped
config (train step and predict), with the exact / stock ratio (no timings asserted). Both
command lines run in children forked from one interpreter (tests/forked_runs.py)."""
import os.path as osp
import sys

import pytest

from forked_runs import run_tools

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = osp.join(REPO, 'tools', 'benchmark', 'padding_exact_cost.py')
CONFIG = osp.join(REPO, 'configs', 'peg_deformable_detr',
                  'deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py')
#: what both runs import (the exact backbones need mmdet), imported once before the forks
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmdet.models')


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """{'quick': (process, table), 'configs': (process, table)}: ``--quick`` on four
    backbones, and ``--configs`` on the shipped demo config with its own data (generated
    shapes images of different sizes in the user's data/: padded batches), the mode off and
    on, one repetition."""
    sys.path.insert(0, osp.join(REPO, 'tools', 'dataset_converters'))
    from make_shapes_coco import make_shapes_coco
    folder = tmp_path_factory.mktemp('padding_cost')
    make_shapes_coco(str(folder / 'data' / 'shapes_coco'), num_train=4, num_val=4,
                     min_size=96, max_size=128, seed=0)
    argv = {'quick': ['--quick', '--threads', '1', '--models', 'pvt-t', 'swin-t', 'pervit-t',
                      'cpvt-s+pyramid', '--out', 'quick.md'],
            'configs': ['--threads', '1', '--configs', CONFIG, '--keep-data', '--repeats', '1',
                        '--warmup', '0', '--out', 'configs.md']}
    done = run_tools([dict(argv=[TOOL] + a, cwd=str(folder)) for a in argv.values()],
                     preload=PRELOAD)
    return {name: (proc, (folder / f'{name}.md').read_text() if proc.returncode == 0 else '')
            for name, proc in zip(argv, done)}


def test_quick_run_prints_a_row_per_backbone_and_stage(runs):
    proc, text = runs['quick']
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in text.splitlines() if line.startswith(
        ('| PVT', '| Swin', '| PerViT', '| CPVT'))]
    assert [r.split('|')[1:3] for r in rows] == [
        [' PVTPEG-T ', ' forward '], [' PVTPEG-T ', ' train '],
        [' SwinPEG-T ', ' forward '], [' SwinPEG-T ', ' train '],
        [' PerViT-T ', ' forward '], [' PerViT-T ', ' forward, new sizes '],
        [' PerViT-T ', ' train '],
        [' CPVT-S + SimplePyramid ', ' forward '], [' CPVT-S + SimplePyramid ', ' train ']]
    assert all(float(r.split('|')[5]) > 0 for r in rows)


def test_configs_mode_times_train_step_and_predict_of_a_shipped_config(runs):
    """``--configs``: the shipped demo config (its own data, generated shapes images of
    different sizes: padded batches) timed with the mode off and on, train step and predict,
    one row each, the batches padded."""
    proc, text = runs['configs']
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split('|')[1:-1] for line in text.splitlines()
            if line.startswith('| deformable-detr')]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows] == [
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'train', '1/1'),
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'predict', '1/1')]
    assert all(float(r[5]) > 0 for r in rows)
