"""`type='mmposenc.X'` resolves from configs whose default scope is any of the hosts, and
`import mmposenc.models` imports none of them."""
import json
import subprocess
import sys

import pytest
from mmengine.registry import DefaultScope

from conftest import REPO_ROOT

HOSTS = ['mmdet', 'mmseg', 'mmpretrain']

# One fresh interpreter imports the stack below mmposenc (torch, mmcv, mmengine: nothing of
# mmposenc or of the hosts), then forks one child per check: each child starts from that state,
# with nothing of mmposenc imported and no host imported or set as default scope, as a fresh
# interpreter would (the checks need that state, not a new torch import each).
FRESH = '''
import json, os, sys, traceback
import torch, mmcv.cnn, mmengine.registry
OURS = ('mmposenc', 'mmdet', 'mmseg', 'mmpretrain')
early = sorted(m for m in sys.modules if m.split('.')[0] in OURS)
assert not early, f'the stack imported {early}'


def models_package():
    import mmposenc.models
    return sorted(m for m in ('mmdet', 'mmseg') if m in sys.modules)


def host_scope(host):
    from mmengine.registry import init_default_scope
    init_default_scope(host)
    MODELS = __import__(host + '.registry', fromlist=['MODELS']).MODELS
    assert 'mmposenc' not in sys.modules
    peg = MODELS.build(dict(type='mmposenc.PEG', in_channels=8))
    assert type(peg).__module__.startswith('mmposenc.'), type(peg)
    assert MODELS.get('mmposenc.PEG') is type(peg)
    return 'ok'


def in_child(check, *args):
    """check(*args) in a forked child: its return value, or the traceback it raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = dict(result=check(*args))
        except BaseException:
            out = dict(error=traceback.format_exc())
        with os.fdopen(write, 'w') as f:
            f.write(json.dumps(out))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        out = json.loads(f.read())
    os.waitpid(pid, 0)
    return out


results = dict(models=in_child(models_package))
results.update({host: in_child(host_scope, host) for host in sys.argv[1:]})
print('RESULTS ' + json.dumps(results))
'''


@pytest.fixture(scope='module')
def fresh():
    """What each check saw in its child of one fresh interpreter (see ``FRESH``)."""
    res = subprocess.run([sys.executable, '-W', 'ignore', '-c', FRESH, *HOSTS],
                         capture_output=True, text=True, cwd=REPO_ROOT)
    assert res.returncode == 0 and 'RESULTS ' in res.stdout, res.stderr[-3000:]
    return json.loads(res.stdout.split('RESULTS ')[-1])


def test_models_package_does_not_import_hosts(fresh):
    """`import mmposenc.models` must stay light: detectors come in through custom_imports."""
    assert 'error' not in fresh['models'], fresh['models']['error']
    assert fresh['models']['result'] == [], f'mmposenc.models imported {fresh["models"]}'


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
def test_scoped_model_type_resolves_under_host_scope(fresh, host):
    """With nothing of mmposenc imported yet (a child of a fresh interpreter, see ``FRESH``),
    the host's registry finds `mmposenc.PEG` and builds it; host types still resolve as
    before."""
    assert fresh[host] == dict(result='ok'), fresh[host].get('error')


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
