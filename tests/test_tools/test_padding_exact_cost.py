"""tools/benchmark/padding_exact_cost.py: a fresh process on a small input prints one row per
backbone and stage, with the exact / stock ratio (no timings asserted)."""
import os.path as osp
import subprocess
import sys

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def test_quick_run_prints_a_row_per_backbone_and_stage(tmp_path):
    out = tmp_path / 'cost.md'
    proc = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'benchmark', 'padding_exact_cost.py'),
         '--quick', '--threads', '1', '--models', 'pvt-t', 'swin-t', 'pervit-t',
         'cpvt-s+pyramid', '--out', str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith(
        ('| PVT', '| Swin', '| PerViT', '| CPVT'))]
    assert [r.split('|')[1:3] for r in rows] == [
        [' PVTPEG-T ', ' forward '], [' PVTPEG-T ', ' train '],
        [' SwinPEG-T ', ' forward '], [' SwinPEG-T ', ' train '],
        [' PerViT-T ', ' forward '], [' PerViT-T ', ' forward, new sizes '],
        [' PerViT-T ', ' train '],
        [' CPVT-S + SimplePyramid ', ' forward '], [' CPVT-S + SimplePyramid ', ' train ']]
    assert all(float(r.split('|')[5]) > 0 for r in rows)


def test_configs_mode_times_train_step_and_predict_of_a_shipped_config(tmp_path):
    """``--configs``: the shipped demo config (its own data, generated shapes images of
    different sizes: padded batches) timed with the mode off and on, train step and predict,
    one row each, the batches padded."""
    sys.path.insert(0, osp.join(REPO, 'tools', 'dataset_converters'))
    from make_shapes_coco import make_shapes_coco
    make_shapes_coco(str(tmp_path / 'data' / 'shapes_coco'), num_train=4, num_val=4,
                     min_size=96, max_size=128, seed=0)
    config = osp.join(REPO, 'configs', 'peg_deformable_detr',
                      'deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py')
    out = tmp_path / 'cost.md'
    proc = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'benchmark', 'padding_exact_cost.py'),
         '--threads', '1', '--configs', config, '--keep-data', '--repeats', '1', '--warmup',
         '0', '--out', str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split('|')[1:-1] for line in out.read_text().splitlines()
            if line.startswith('| deformable-detr')]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows] == [
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'train', '1/1'),
        ('deformable-detr-peg_r18-quarter_1xb4-2500i_shapes', 'predict', '1/1')]
    assert all(float(r[5]) > 0 for r in rows)
