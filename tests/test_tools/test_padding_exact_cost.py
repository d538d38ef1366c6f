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
         '--quick', '--threads', '1', '--models', 'pvt-t', 'swin-t', '--out', str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith('| PVT')
            or line.startswith('| Swin')]
    assert [r.split('|')[1:3] for r in rows] == [
        [' PVTPEG-T ', ' forward '], [' PVTPEG-T ', ' train '],
        [' SwinPEG-T ', ' forward '], [' SwinPEG-T ', ' train ']]
    assert all(float(r.split('|')[5]) > 0 for r in rows)
