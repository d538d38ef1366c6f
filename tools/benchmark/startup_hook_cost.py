"""What mmposenc's startup hook (``mmposenc-startup.pth``) costs an interpreter.

Three measurements, each with the hook on and off (``MMPOSENC_NO_STARTUP_HOOK=1`` and
``MMPOSENC_NO_TORCH_OPS=1``) in the same environment, the runs of the two interleaved (on, off,
on, off, ...):

1. ``python -c pass``, ``--runs`` fresh interpreters each: median and mean wall time, and the
   mean of the paired differences with its standard error (every interpreter start pays this);
2. ``python -X importtime -c pass``: what the hook imports at startup and its own import time
   (``_mmposenc_startup`` should be the only extra module the import system logs; the hook
   loads its copy of ``mmposenc/ops/ext_finder.py`` from the file);
3. ``python -c 'import mmengine.config'``: the same paired timing, which includes the
   registration the hook runs once ``mmengine.config`` is loaded, and that registration
   timed alone in-process (``_mmposenc_startup.register_config_package()``).

All with bytecode caching on (``PYTHONDONTWRITEBYTECODE`` removed from the environment), as
an installed package has it.

Usage::

    python tools/benchmark/startup_hook_cost.py                  # this interpreter's env
    python tools/benchmark/startup_hook_cost.py --runs 400 --python /path/to/venv/bin/python
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ENV_OFF = 'MMPOSENC_NO_STARTUP_HOOK'
#: the hook's other half (mmcv._ext where mmcv has no compiled ops): off too for "hook off"
OPS_OFF = 'MMPOSENC_NO_TORCH_OPS'


def _env(hook):
    # PYTHONDONTWRITEBYTECODE dropped: an installed hook has its .pyc (pip compiles on
    # install; an editable one writes it on first import), without it every start compiles
    # the module (~2 ms measured)
    env = {k: v for k, v in os.environ.items()
           if k not in (ENV_OFF, OPS_OFF, 'PYTHONPATH', 'PYTHONDONTWRITEBYTECODE')}
    if not hook:
        env[ENV_OFF] = env[OPS_OFF] = '1'
    return env


def _wall(python, code, hook):
    t0 = time.perf_counter()
    res = subprocess.run([python, '-c', code], env=_env(hook), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f'{python} -c {code!r} (hook {"on" if hook else "off"}) failed:\n'
                 f'{res.stderr[-3000:]}')
    return elapsed


def paired(python, code, runs):
    """Wall times (s) of ``python -c code`` with and without the hook, interleaved."""
    _wall(python, code, True), _wall(python, code, False)  # warm the file cache / .pyc
    on, off = [], []
    for i in range(runs):
        first = i % 2 == 0  # alternate which one goes first
        for hook in ((True, False) if first else (False, True)):
            (on if hook else off).append(_wall(python, code, hook))
    diffs = [a - b for a, b in zip(on, off)]
    return dict(
        on_median=statistics.median(on), off_median=statistics.median(off),
        on_mean=statistics.fmean(on), off_mean=statistics.fmean(off),
        diff_mean=statistics.fmean(diffs),
        diff_sem=statistics.stdev(diffs) / len(diffs) ** 0.5,
        diff_median=statistics.median(diffs))


def importtime(python, hook, repeats=21):
    """``-X importtime -c pass``: {module: (self us, cumulative us)}, medians over
    ``repeats`` interpreters."""
    runs = []
    for _ in range(repeats):
        res = subprocess.run([python, '-X', 'importtime', '-c', 'pass'], env=_env(hook),
                             capture_output=True, text=True, check=True)
        out = {}
        for line in res.stderr.splitlines():
            if not line.startswith('import time:') or 'self [us]' in line:
                continue
            self_us, cum_us, name = line[len('import time:'):].split('|')
            out[name.strip()] = (int(self_us), int(cum_us))
        runs.append(out)
    return {name: tuple(int(statistics.median(r[name][i] for r in runs)) for i in (0, 1))
            for name in runs[-1]}


def registration_alone(python, repeats=20):
    """In-process time (us) of the registration the hook runs, hook off so that it runs
    here for the first time: median over ``repeats`` fresh interpreters."""
    code = ('import time, sys, mmengine.config\n'
            'import _mmposenc_startup as h\n'
            't = time.perf_counter(); ok = h.register_config_package()\n'
            'dt = time.perf_counter() - t\n'
            'from mmengine.config.utils import MODULE2PACKAGE\n'
            'assert ok and "mmposenc" in MODULE2PACKAGE and "mmposenc" not in sys.modules\n'
            'print(dt * 1e6)')
    times = []
    for _ in range(repeats):
        res = subprocess.run([python, '-c', code], env=_env(False), capture_output=True,
                             text=True, check=True)
        times.append(float(res.stdout.strip()))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--python', default=sys.executable, help='interpreter to measure')
    parser.add_argument('--runs', type=int, default=200,
                        help='fresh interpreters per setting for python -c pass')
    parser.add_argument('--mmengine-runs', type=int, default=60,
                        help='fresh interpreters per setting for import mmengine.config')
    args = parser.parse_args()
    py = args.python

    on, off = importtime(py, True), importtime(py, False)
    if '_mmposenc_startup' not in on:
        sys.exit(f'{py}: the startup hook is not installed (no _mmposenc_startup at startup); '
                 'reinstall mmposenc (tools/setup_env.sh or pip install)')
    print(f'interpreter: {py} ({sys.version.split()[0]}), {os.cpu_count()} CPUs, '
          f'load average {os.getloadavg()[0]:.2f}')
    print(f'modules imported at startup: {len(on)} with the hook, {len(off)} without; '
          f'extra: {sorted(set(on) - set(off))}; missing: {sorted(set(off) - set(on))}')
    print(f'-X importtime (median of 21): _mmposenc_startup self {on["_mmposenc_startup"][0]} '
          f'us, cumulative {on["_mmposenc_startup"][1]} us')

    for label, code, runs in (
            ('python -c pass', 'pass', args.runs),
            ('python -c "import mmengine.config"', 'import mmengine.config', args.mmengine_runs)):
        r = paired(py, code, runs)
        print(f'{label}, {runs} runs each, interleaved: '
              f'hook on median {r["on_median"] * 1e3:.2f} ms (mean {r["on_mean"] * 1e3:.2f}), '
              f'off median {r["off_median"] * 1e3:.2f} ms (mean {r["off_mean"] * 1e3:.2f}); '
              f'paired difference on - off: mean {r["diff_mean"] * 1e3:+.3f} '
              f'+- {r["diff_sem"] * 1e3:.3f} ms (s.e.), median {r["diff_median"] * 1e3:+.3f} ms')
    print(f'registration alone (in-process, after import mmengine.config): '
          f'{registration_alone(py):.0f} us (median of 20 interpreters)')


if __name__ == '__main__':
    main()
