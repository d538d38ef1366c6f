"""tools/benchmark/run_all.py: interleaved medians and the markdown table (no timings asserted)."""

import torch
from tool_files import load_tool

from mmposenc.utils.tools.machine import interleaved_medians

run_all = load_tool('benchmark/run_all.py')


def test_repetitions_are_interleaved():
    calls = []
    res = interleaved_medians({'a': lambda: calls.append('a'), 'b': lambda: calls.append('b')},
                              repeats=3, warmup=1)
    assert calls == ['a', 'b'] + ['a', 'b'] * 3
    assert set(res) == {'a', 'b'} and all(v >= 0 for v in res.values())


def test_rows_and_markdown():
    rows = [run_all.row('x', 0.0102, 0.0100, 1.02), run_all.row('y', 0.0110, 0.0100, 1.0),
            run_all.row('z', 0.0050, 0.0100)]
    assert [r['met'] for r in rows] == [True, False, None]
    info = dict(cpu='CPU X', cores='2', torch='2.x', threads='1', omp_num_threads='1',
                python='3.11', date='today')
    text = run_all.to_markdown(rows, info, quick=False)
    lines = text.splitlines()
    assert 'CPU X, 2 cores; torch 2.x, 1 threads' in lines[2]
    table = [line for line in lines if line.startswith('| ')]
    assert len(table) == 1 + 3
    assert table[1] == '| x | 10.20 | 10.00 | 1.020 | <= 1.02 | yes |'
    assert table[2].endswith('| 1.100 | <= 1.00 | no |')
    assert table[3].endswith('| 0.500 | - | - |')


def test_quick_run_writes_the_table(tmp_path):
    out = tmp_path / 'bench.md'
    threads = torch.get_num_threads()
    rows = run_all.main(['--quick', '--only', 'cpvt', 'sape2', 'cape', '--out', str(out)])
    torch.set_num_threads(threads)
    assert len(rows) == 1 + 2 + 2
    assert rows[0]['target'] == 1.02 and rows[0]['benchmark'].startswith('CPVT-Ti / DeiT-Ti')
    for r in rows:
        assert r['ours'] > 0 and r['baseline'] > 0
        assert abs(r['ratio'] - r['ours'] / r['baseline']) < 1e-9
    text = out.read_text()
    info = run_all.machine_info()
    assert info['cpu'] in text and f'torch {torch.__version__}' in text
    assert len([line for line in text.splitlines() if line.startswith('| ')]) == 1 + 5
