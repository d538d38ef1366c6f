"""What the benchmark scripts share: a description of the machine they ran on."""
import os
import platform

import torch


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
    return (f'{cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, '
            f'{torch.get_num_threads()} thread(s)')
