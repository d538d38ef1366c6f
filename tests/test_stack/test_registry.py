"""`type='mmposenc.X'` resolves from configs whose default scope is any of the hosts, and
`import mmposenc.models` imports none of them."""
import json

import pytest
from mmengine.registry import DefaultScope

from conftest import REPO_ROOT
from forked_runs import run_tools

HOSTS = ['mmdet', 'mmseg', 'mmpretrain']

# One fresh interpreter imports the stack below mmposenc (torch, mmcv, mmengine: nothing of
# mmposenc or of the hosts), then forks one child per check (tests/forked_runs.py): each child
# starts from that state, with nothing of mmposenc imported and no host imported or set as
# default scope (asserted first), as a fresh interpreter would (the checks need that state, not
# a new torch import each). Each prints its result as JSON.
FRESH_STATE = """\
import json, sys
OURS = ('mmposenc', 'mmdet', 'mmseg', 'mmpretrain')
early = sorted(m for m in sys.modules if m.split('.')[0] in OURS)
assert not early, f'the stack imported {early}'
"""
MODELS_PACKAGE = FRESH_STATE + """\
import mmposenc.models
print('RESULT ' + json.dumps(sorted(m for m in ('mmdet', 'mmseg') if m in sys.modules)))
"""
HOST_SCOPE = FRESH_STATE + """\
from mmengine.registry import init_default_scope
host = sys.argv[1]
init_default_scope(host)
MODELS = __import__(host + '.registry', fromlist=['MODELS']).MODELS
assert 'mmposenc' not in sys.modules
peg = MODELS.build(dict(type='mmposenc.PEG', in_channels=8))
assert type(peg).__module__.startswith('mmposenc.'), type(peg)
assert MODELS.get('mmposenc.PEG') is type(peg)
print('RESULT ' + json.dumps('ok'))
"""


@pytest.fixture(scope='module')
def fresh():
    """What each check printed in its child of one fresh interpreter (see ``FRESH_STATE``):
    {check: its result, or the child's output when it failed}."""
    runs = [dict(code=MODELS_PACKAGE, cwd=REPO_ROOT)] + [
        dict(code=HOST_SCOPE, argv=[host], cwd=REPO_ROOT) for host in HOSTS]
    done = run_tools(runs, preload=('torch', 'mmcv.cnn', 'mmengine.registry'),
                     options=('-W', 'ignore'))
    return {name: (json.loads(res.stdout.split('RESULT ')[-1]) if res.returncode == 0
                   and 'RESULT ' in res.stdout else dict(error=res.stdout + res.stderr[-3000:]))
            for name, res in zip(['models', *HOSTS], done)}


def test_models_package_does_not_import_hosts(fresh):
    """`import mmposenc.models` must stay light: detectors come in through custom_imports."""
    assert fresh['models'] == [], f'mmposenc.models imported {fresh["models"]}'


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
    """With nothing of mmposenc imported yet (a child of a fresh interpreter, see ``FRESH_STATE``),
    the host's registry finds `mmposenc.PEG` and builds it; host types still resolve as
    before."""
    assert fresh[host] == 'ok', fresh[host]


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
