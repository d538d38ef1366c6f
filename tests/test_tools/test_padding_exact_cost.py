"""tools/benchmark/padding_exact_cost.py from a folder of the user's: the bare backbones on a
small input (one row per backbone and stage) and ``--configs`` on a shipped config (train step
and predict), with the exact / stock ratio (no timings asserted). The tool's ``main`` runs in
this process with its command line (tests/forked_runs.py's run_in_process: torch's thread
count and random state are restored)."""
import os.path as osp

import pytest
from forked_runs import run_in_process
from tool_files import load_tool

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = osp.join(REPO, 'tools', 'benchmark', 'padding_exact_cost.py')


@pytest.fixture
def run_tool(tmp_path):
    """Run the tool's command line from ``tmp_path``; return the table it wrote (--out)."""

    def run(argv):
        res = run_in_process(dict(argv=[TOOL, *argv, '--out', 'cost.md'], cwd=str(tmp_path)))
        assert res.returncode == 0, res.stderr[-3000:]
        return (tmp_path / 'cost.md').read_text()
    return run


def test_quick_run_prints_a_row_per_backbone_and_stage(run_tool):
    text = run_tool(['--quick', '--threads', '1', '--models', 'pvt-t', 'swin-t', 'pervit-t',
                     'cpvt-s+pyramid'])
    rows = [line for line in text.splitlines() if line.startswith(
        ('| PVT', '| Swin', '| PerViT', '| CPVT'))]
    assert [r.split('|')[1:3] for r in rows] == [
        [' PVTPEG-T ', ' forward '], [' PVTPEG-T ', ' train '],
        [' SwinPEG-T ', ' forward '], [' SwinPEG-T ', ' train '],
        [' PerViT-T ', ' forward '], [' PerViT-T ', ' forward, new sizes '],
        [' PerViT-T ', ' train '],
        [' CPVT-S + SimplePyramid ', ' forward '], [' CPVT-S + SimplePyramid ', ' train ']]
    assert all(float(r.split('|')[5]) > 0 for r in rows)


def test_configs_mode_times_train_step_and_predict_of_a_shipped_config(run_tool, tmp_path):
    """``--configs``: the shipped demo config (its own data, generated shapes images of
    different sizes in the user's data/: padded batches) timed with the mode off and on, train
    step and predict, one row each, the batches padded."""
    from mmposenc.utils.tools.shapes_coco import make_shapes_coco
    make_shapes_coco(str(tmp_path / 'data' / 'shapes_coco'), num_train=4, num_val=4,
                     min_size=96, max_size=128, seed=0)
    config = osp.join(REPO, 'configs', 'peg_deformable_detr',
                      'deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py')
    text = run_tool(['--threads', '1', '--configs', config, '--keep-data', '--repeats', '1',
                     '--warmup', '0'])
    rows = [line.split('|')[1:-1] for line in text.splitlines()
            if line.startswith('| deformable-detr')]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows] == [
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'train', '1/1'),
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'predict', '1/1')]
    assert all(float(r[5]) > 0 for r in rows)


def test_init_weights_offline_fills_uninitialised_weights_and_downloads_nothing():
    """``--configs`` initialises the built model as a training run would, without fetching a
    ``Pretrained`` checkpoint: a weight that a host fills only in ``init_weights`` (mmdet's
    Deformable-DETR ``level_embed``, made with ``torch.Tensor``) must not stay NaN."""
    import torch
    from mmengine.model import BaseModule, Sequential
    from torch import nn
    init_weights_offline = load_tool('benchmark/padding_exact_cost.py').init_weights_offline

    class Host(BaseModule):

        def __init__(self):
            super().__init__(init_cfg=[
                dict(type='Pretrained', checkpoint='/nonexistent/r50.pth'),
                dict(type='Constant', val=0.5, layer='Linear')])
            self.fc = nn.Linear(2, 2)
            self.level_embed = nn.Parameter(torch.full((3, 2), float('nan')))

        def init_weights(self):
            super().init_weights()
            nn.init.normal_(self.level_embed)

    with pytest.raises(FileNotFoundError):  # what a plain init_weights would do offline
        Host().init_weights()
    model = Sequential(Host())
    assert init_weights_offline(model) == ['/nonexistent/r50.pth']
    assert torch.isfinite(model[0].level_embed).all()
    assert (model[0].fc.weight == 0.5).all()  # the other init_cfg entries still apply
