"""tools/misc/mmcv_build.py: the cache key and CUDA architectures of a compiled mmcv
(``make setup ROUTE=compiled``), with a stand-in torch that reports GPUs (no GPU here)."""
import importlib.util
import os.path as osp
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO_ROOT

PATH = osp.join(REPO_ROOT, 'tools', 'misc', 'mmcv_build.py')
_spec = importlib.util.spec_from_file_location('mmcv_build_under_test', PATH)
mb = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mb)


def fake_torch(cuda='13.0', gpus=(), version='2.13.0+cu130'):
    caps = list(gpus)
    return SimpleNamespace(
        __version__=version, _C=SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
        version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(is_available=lambda: bool(caps), device_count=lambda: len(caps),
                             get_device_capability=lambda i: caps[i]))


NVCC = {'CUDA_HOME': '/nowhere', 'PATH': '/nowhere'}


@pytest.fixture
def nvcc(tmp_path):
    """An environment with an ``nvcc`` in CUDA_HOME."""
    (tmp_path / 'bin').mkdir()
    (tmp_path / 'bin' / 'nvcc').write_text('')
    return {'CUDA_HOME': str(tmp_path), 'PATH': '/nowhere'}


def test_a_cpu_build_is_keyed_as_before():
    key, arches = mb.build_key(fake_torch(), {'PATH': '/nowhere'})
    py = f'cp{sys.version_info[0]}{sys.version_info[1]}'
    assert (key, arches) == (f'torch-2.13.0+cu130-{py}-cxx11abi1-cpu', 'cpu')


def test_a_gpu_build_names_the_visible_architectures_in_key_and_list(nvcc):
    key, arches = mb.build_key(fake_torch(gpus=[(9, 0), (8, 0), (9, 0)]), nvcc)
    assert arches == '8.0;9.0'
    assert key.endswith('-cu130-sm80-sm90')


def test_an_explicit_arch_list_wins_and_is_normalised(nvcc):
    env = dict(nvcc, TORCH_CUDA_ARCH_LIST='9.0+PTX 8.6;8.6')
    key, arches = mb.build_key(fake_torch(gpus=[(8, 0)]), env)
    assert arches == '8.6;9.0+PTX' and key.endswith('-sm86-sm90ptx')


def test_a_gpu_without_nvcc_is_refused_in_one_line():
    with pytest.raises(mb.SetupError, match=r'needs the CUDA 13\.0 toolkit \(nvcc\).*ops-free'):
        mb.build_key(fake_torch(gpus=[(9, 0)]), NVCC)


def test_force_cuda_without_a_gpu_needs_an_arch_list(nvcc):
    with pytest.raises(mb.SetupError, match='set TORCH_CUDA_ARCH_LIST'):
        mb.build_key(fake_torch(), dict(nvcc, FORCE_CUDA='1'))
    key, arches = mb.build_key(fake_torch(), dict(nvcc, FORCE_CUDA='1',
                                                  TORCH_CUDA_ARCH_LIST='8.0'))
    assert arches == '8.0' and key.endswith('-cu130-sm80')


@pytest.mark.parametrize('arches,gpu,ok', [
    ('8.0', (8, 0), True), ('8.0', (8, 6), True),  # same major, later minor: binary runs
    ('8.6', (8, 0), False), ('8.0', (9, 0), False),  # earlier minor / another major: no
    ('8.0+PTX', (9, 0), True), ('9.0+PTX', (8, 0), False),  # PTX: later GPUs only
])
def test_covers(arches, gpu, ok):
    assert mb.covers(mb.parse_arches(arches), gpu) is ok


def test_a_wheel_for_other_gpus_is_refused_naming_them():
    with pytest.raises(mb.SetupError, match=r'8\.0;8\.6.*do not cover.*\(9\.0\).*refused'):
        mb.check_covers(fake_torch(gpus=[(9, 0), (8, 6)]), '8.0;8.6')
    mb.check_covers(fake_torch(gpus=[(9, 0)]), '8.0;9.0')
    with pytest.raises(mb.SetupError, match='without CUDA ops and a GPU is in sight'):
        mb.check_covers(fake_torch(gpus=[(9, 0)]), 'cpu')
    mb.check_covers(fake_torch(), 'cpu')


def test_the_command_line_on_this_machine():
    res = subprocess.run([sys.executable, PATH, 'key'], capture_output=True, text=True,
                         timeout=120)
    import torch
    if torch.cuda.is_available():
        pytest.skip('a GPU is visible: the key depends on its toolkit')
    assert res.returncode == 0, res.stderr
    key, arches = res.stdout.strip().split('\t')
    assert key.startswith(f'torch-{torch.__version__}-') and arches == 'cpu'
    res = subprocess.run([sys.executable, PATH, 'covers', 'nonsense'], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.count('\n') == 1, res.stderr
