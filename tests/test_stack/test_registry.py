"""`type='mmposenc.X'` resolves from configs whose default scope is any of the hosts."""
import subprocess
import sys

import pytest
from mmengine.registry import DefaultScope

from conftest import REPO_ROOT

HOSTS = ['mmdet', 'mmseg', 'mmpretrain']


def test_registries_are_children_of_mmengine():
    from mmengine.registry import MODELS as ROOT_MODELS
    from mmengine.registry import OPTIM_WRAPPERS as ROOT_OPTIM_WRAPPERS

    from mmposenc.registry import MODELS, OPTIM_WRAPPERS
    assert MODELS.scope == 'mmposenc' and MODELS.parent is ROOT_MODELS
    assert ROOT_MODELS.children['mmposenc'] is MODELS
    assert OPTIM_WRAPPERS.parent is ROOT_OPTIM_WRAPPERS
    # nothing of ours is registered into mmengine's root registries
    assert not [k for k, v in ROOT_MODELS.module_dict.items() if v.__module__.startswith(
        'mmposenc')]


@pytest.mark.parametrize('host', HOSTS)
def test_scoped_model_type_resolves_under_host_scope(host):
    """In a fresh interpreter (nothing of mmposenc imported yet), the host's registry finds
    `mmposenc.PEG` and builds it; host types still resolve as before."""
    code = f'''
import sys
from mmengine.registry import init_default_scope
init_default_scope({host!r})
from {host}.registry import MODELS
assert 'mmposenc' not in sys.modules
peg = MODELS.build(dict(type='mmposenc.PEG', in_channels=8))
assert type(peg).__module__.startswith('mmposenc.'), type(peg)
assert MODELS.get('mmposenc.PEG') is type(peg)
print('ok')
'''
    res = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         cwd=REPO_ROOT)
    assert res.returncode == 0 and res.stdout.strip().endswith('ok'), res.stderr[-3000:]


@pytest.mark.parametrize('host', HOSTS)
def test_scoped_optim_wrapper_resolves_under_host_scope(host):
    import torch
    from mmengine.optim import build_optim_wrapper
    model = torch.nn.Linear(2, 2)
    with DefaultScope.overwrite_default_scope(host):
        wrapper = build_optim_wrapper(
            model, dict(type='mmposenc.BF16OptimWrapper',
                        optimizer=dict(type='SGD', lr=0.1)))
    from mmposenc.engine import BF16OptimWrapper
    assert isinstance(wrapper, BF16OptimWrapper)
    with wrapper.optim_context(model):
        assert model(torch.ones(1, 2)).dtype == torch.bfloat16


def test_unknown_scoped_type_is_a_clear_error():
    from mmposenc.registry import MODELS
    with DefaultScope.overwrite_default_scope('mmdet'):
        with pytest.raises(KeyError, match='NoSuchThing'):
            MODELS.build(dict(type='mmposenc.NoSuchThing'))


@pytest.mark.parametrize('host', HOSTS)
def test_own_registry_builds_unscoped_own_types_under_host_scope(host):
    """Our code builds its own layers by plain name even while a host scope is the default,
    and host types still resolve through the host."""
    import torch.nn as nn
    from mmposenc.registry import MODELS
    with DefaultScope.overwrite_default_scope(host):
        peg = MODELS.build(dict(type='PEG', in_channels=4))
        act = MODELS.build(dict(type='GELU'))
    assert type(peg).__name__ == 'PEG' and isinstance(act, nn.GELU)
