"""tools/benchmark/rope_cost.py: a fresh process on a tiny model prints one row per stage,
backend and encoding, with the ratios to no encoding and to RoPE-Axial (no timings asserted)."""
import os.path as osp
import subprocess
import sys

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def test_quick_run_prints_a_row_per_stage_and_encoding(tmp_path):
    out = tmp_path / 'rope_cost.md'
    proc = subprocess.run(
        [sys.executable, osp.join(REPO, 'tools', 'benchmark', 'rope_cost.py'), '--quick',
         '--threads', '1', '--backends', 'eager', '--out', str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split('|')[1:-1] for line in out.read_text().splitlines()
            if line.startswith(('| train', '| eval'))]
    assert [[c.strip() for c in r[:3]] for r in rows] == [
        ['train', 'eager', 'none'], ['train', 'eager', 'rope-axial'],
        ['train', 'eager', 'rope-mixed'], ['train', 'eager', 'rope-dinov3'],
        ['eval', 'eager', 'none'], ['eval', 'eager', 'rope-axial'],
        ['eval', 'eager', 'rope-mixed'], ['eval', 'eager', 'rope-mixed, no cache'],
        ['eval', 'eager', 'rope-dinov3']]
    for r in rows:
        assert float(r[3]) > 0 and float(r[4]) > 0 and float(r[5]) > 0
    assert all(float(r[4]) == 1. for r in rows if r[2].strip() == 'none')
