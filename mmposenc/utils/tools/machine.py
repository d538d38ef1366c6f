"""The machine a benchmark ran on and interleaved timings (the scripts of ``tools/benchmark/``).

Examples:
    >>> from mmposenc.utils.tools.machine import machine
    >>> 'cores; torch' in machine()
    True
"""
import os
import platform
import statistics
import time
from typing import Callable, Dict


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what :mod:`platform` knows."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """One line: CPU model, cores, torch version and intra-op threads."""
    import torch
    return (f'{cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, '
            f'{torch.get_num_threads()} thread(s)')


def interleaved_medians(fns: Dict[str, Callable], repeats: int, warmup: int = 2
                        ) -> Dict[str, float]:
    """Median seconds of every function, the repetitions interleaved (a, b, a, b, ...) so that
    background load hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}
