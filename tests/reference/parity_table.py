"""Print the table of ``docs/reference_parity.md`` from a run of ``tests/test_reference``.

Every test of ``tests/test_reference`` records, through its ``parity`` fixture, the largest
``|ours - reference|`` over its checks; with ``MMPOSENC_PARITY_REPORT=<file>`` pytest writes
the records there. This script groups them by test function, method and module (the
parametrised cases of one test become one row) and prints a Markdown table: method, our
module, reference (repository at its commit, function), grids and modes, cases, the largest
difference, the largest reference value (for scale), the test.

Usage::

    python tests/reference/parity_table.py --run          # runs the tests, then prints
    python tests/reference/parity_table.py report.json    # from a report written before
"""
import argparse
import json
import os
import os.path as osp
import subprocess
import sys
import tempfile
from collections import OrderedDict

HERE = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(osp.dirname(HERE))


def run_tests():
    fd, path = tempfile.mkstemp(suffix='.json')
    os.close(fd)
    env = dict(os.environ, MMPOSENC_PARITY_REPORT=path)
    subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                    'tests/test_reference'], cwd=ROOT, env=env, check=True)
    return path


def fmt(x):
    return '0' if x == 0 else f'{x:.1e}'


def table(records):
    rows = OrderedDict()
    for r in records:
        func = r['test'].split('[')[0]
        key = (func, r.get('method'), r.get('ours'))
        row = rows.setdefault(key, dict(r, cases=0, max_abs_diff=0., max_abs_ref=0.))
        row['cases'] += 1
        row['max_abs_diff'] = max(row['max_abs_diff'], r['max_abs_diff'])
        row['max_abs_ref'] = max(row['max_abs_ref'], r['max_abs_ref'])
    lines = ['| method | ours | reference | grids, modes | cases | max \\|difference\\| '
             '| max \\|reference\\| | checked by |',
             '| :-- | :-- | :-- | :-- | --: | --: | --: | :-- |']
    for (func, method, ours), row in rows.items():
        with open(osp.join(HERE, 'fixtures', row['reference'] + '.json')) as f:
            meta = json.load(f)
        repo = meta['repository'].replace('https://github.com/', '')
        ref = f'[{repo}]({meta["repository"]}/tree/{meta["commit"]}) `{row.get("function", "")}`'
        diff = fmt(row['max_abs_diff'])
        if row.get('note'):
            diff += f' ({row["note"]})'
        lines.append(f'| {method} | `{ours}` | {ref} | {row.get("grids", "")} | {row["cases"]} '
                     f'| {diff} | {fmt(row["max_abs_ref"])} | {{test}}`{func}` |')
    return '\n'.join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('report', nargs='?', help='a report written by the tests')
    parser.add_argument('--run', action='store_true', help='run tests/test_reference first')
    args = parser.parse_args()
    if args.run == bool(args.report):
        parser.error('give a report or --run')
    path = run_tests() if args.run else args.report
    with open(path) as f:
        print(table(json.load(f)))


if __name__ == '__main__':
    main()
