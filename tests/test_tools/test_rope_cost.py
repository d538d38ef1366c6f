"""tools/benchmark/rope_cost.py on a tiny model prints one row per stage, backend and encoding,
with the ratios to no encoding and to RoPE-Axial (no timings asserted). Its ``main`` runs in
this process from a folder of the user's (tests/forked_runs.py's run_in_process: torch's thread
count, its random state and ``sys.path`` are restored afterwards)."""
import os.path as osp

from forked_runs import run_in_process

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = osp.join(REPO, 'tools', 'benchmark', 'rope_cost.py')


def test_quick_run_prints_a_row_per_stage_and_encoding(tmp_path):
    res = run_in_process(dict(argv=[TOOL, '--quick', '--threads', '1', '--backends', 'eager',
                                    '--out', 'rope_cost.md'], cwd=str(tmp_path)))
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [line.split('|')[1:-1] for line in (tmp_path / 'rope_cost.md').read_text()
            .splitlines() if line.startswith(('| train', '| eval'))]
    assert [[c.strip() for c in r[:3]] for r in rows] == [
        ['train', 'eager', 'none'], ['train', 'eager', 'rope-axial'],
        ['train', 'eager', 'rope-mixed'], ['train', 'eager', 'rope-dinov3'],
        ['eval', 'eager', 'none'], ['eval', 'eager', 'rope-axial'],
        ['eval', 'eager', 'rope-mixed'], ['eval', 'eager', 'rope-mixed, no cache'],
        ['eval', 'eager', 'rope-dinov3']]
    for r in rows:
        assert float(r[3]) > 0 and float(r[4]) > 0 and float(r[5]) > 0
    assert all(float(r[4]) == 1. for r in rows if r[2].strip() == 'none')
