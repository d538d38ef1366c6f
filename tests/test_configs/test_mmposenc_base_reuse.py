"""Every shipped config reused from a user's own folder as ``_base_ = 'mmposenc::<config>'``
builds every type as the same config inherited by path does.

For each config under ``configs/`` (the leaves and the ``_base_`` fragments) a user config of
one line, ``_base_ = 'mmposenc::<folder>/<file>.py'``, is written into a temporary folder outside
the repository and loaded with mmengine's ``Config``; the reference is the shipped file loaded
by path. Every dict with a ``type`` in the whole config (model and everything nested in it,
pipelines including TTA, dataloaders, optimizer, schedulers, loops, hooks, evaluators,
visualizer, ...) is resolved in the scope mmengine builds it in, in every kind of registry
(models, transforms, optimizers, ...; the rules, which mimic mmengine, are in
scope_resolution.py). Wherever the reference resolves a type, the user config must resolve it
to the very same class. A type that mmengine would not find (``KeyError: X is not in the
mmposenc::model registry``), and a name that exists both in mmengine's / mmcv's root registry
and in a host (``LoadAnnotations``, ``Resize``, ``RandomFlip``: found in the root, the wrong
class, without an error) both fail.

mmposenc.utils.config_package.register_base_scope is what makes them pass: an ``mmposenc::``
base is loaded as the same file by path, without mmengine's ``_scope_='mmposenc'`` stamps.
"""
import glob
import os.path as osp

import pytest

from conftest import REPO_ROOT
from scope_resolution import mismatches

CONFIG_ROOT = osp.join(REPO_ROOT, 'configs')
CONFIGS = sorted(osp.relpath(p, CONFIG_ROOT)
                 for p in glob.glob(osp.join(CONFIG_ROOT, '**', '*.py'), recursive=True))

#: configs whose top-level pipelines a user reuses as ``_base_.train_pipeline`` / ``{{...}}``
PIPELINE_REUSE = [
    'smoke/detr_r18_1xb2-8it_coco128.py',  # pipelines defined in our file (mmdet)
    'peg_deformable_detr/deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py',  # the demo
    'cape/vit-base-p16_cape_16xb64_in1k.py',  # tta_pipeline defined in our file (mmpretrain)
    'pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py',  # pipelines from mmseg's base
]


# --------------------------------------------------------------------------- loading
@pytest.fixture(scope='module')
def user_project(tmp_path_factory):
    """A user's project folder outside the repository."""
    path = tmp_path_factory.mktemp('my_project')
    assert not str(path).startswith(REPO_ROOT)
    return path


@pytest.fixture(scope='module', autouse=True)
def _registered():
    """mmposenc registers ``mmposenc::`` with mmengine's Config, as the startup hook does.
    (mmengine's package lookups are memoized for the session: tests/conftest.py.)"""
    import mmposenc  # noqa: F401


def _load_pair(user_project, rel, body='', prefix=''):
    """(by path, as a user's ``mmposenc::`` base) for the config ``rel`` followed by ``body``."""
    from mmengine.config import Config
    name = prefix + rel.replace('/', '__')
    user = user_project / name
    user.write_text(f"_base_ = 'mmposenc::{rel}'\n{body}")
    reference = user_project / ('by_path__' + name)
    reference.write_text(f'_base_ = {osp.join(CONFIG_ROOT, rel)!r}\n{body}')
    return Config.fromfile(str(reference)), Config.fromfile(str(user))


#: rel -> the optim_wrapper of the shipped config (by path), kept from the test below for
#: test_every_shipped_config_with_paramwise_cfg_uses_the_summary_constructor
_OPTIM_WRAPPERS = {}


@pytest.mark.parametrize('rel', CONFIGS)
def test_every_type_resolves_as_by_path(rel, user_project, monkeypatch):
    monkeypatch.chdir(user_project)
    reference, user = _load_pair(user_project, rel)
    _OPTIM_WRAPPERS[rel] = reference.get('optim_wrapper', {})
    lines, resolved = mismatches(reference, user)
    assert resolved, f'{rel}: no type of the config resolves by path'
    assert not lines, (f"_base_ = 'mmposenc::{rel}' builds {len(lines)} type(s) otherwise than "
                       'by path:\n' + '\n'.join(lines))


def test_every_shipped_config_is_covered():
    assert len(CONFIGS) > 100
    assert any('/_base_/' in rel for rel in CONFIGS)  # fragments are reused too


@pytest.mark.slow
def test_every_shipped_config_with_paramwise_cfg_uses_the_summary_constructor():
    """Every shipped config (not a ``_base_`` fragment) whose optimizer has a
    ``paramwise_cfg`` uses mmposenc's summary constructor (one line per rule:
    tests/test_engine/test_optim_constructor.py). The configs as loaded by path for
    test_every_type_resolves_as_by_path (run first, in this module's worker), else parsed here."""
    from mmengine.config import Config

    import mmposenc  # noqa: F401
    constructor = 'mmposenc.SummaryOptimWrapperConstructor'
    missing = []
    for rel in CONFIGS:
        if '_base_/' in rel:
            continue
        if rel not in _OPTIM_WRAPPERS:  # run alone (-k): parse it
            _OPTIM_WRAPPERS[rel] = Config.fromfile(
                osp.join(CONFIG_ROOT, rel)).get('optim_wrapper', {})
        optim_wrapper = _OPTIM_WRAPPERS[rel]
        if optim_wrapper.get('paramwise_cfg') and optim_wrapper.get('constructor') != constructor:
            missing.append(rel)
    assert not missing, missing


REUSE = """
train_pipeline = _base_.train_pipeline
test_pipeline = {{_base_.test_pipeline}}
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
"""
TTA_REUSE = """
tta_pipeline = _base_.tta_pipeline
test_dataloader = dict(dataset=dict(pipeline=tta_pipeline))
"""


@pytest.mark.parametrize('rel', PIPELINE_REUSE)
def test_reused_base_pipelines_resolve_as_by_path(rel, user_project, monkeypatch):
    """A user config that takes our pipelines by name (``_base_.train_pipeline``,
    ``{{_base_.test_pipeline}}``, ``_base_.tta_pipeline``) into its own dataloaders."""
    monkeypatch.chdir(user_project)
    body = TTA_REUSE if rel.startswith('cape/') else REUSE
    reference, user = _load_pair(user_project, rel, body, prefix='reuse__')
    lines, resolved = mismatches(reference, user)
    key = 'tta_pipeline' if 'tta_pipeline' in body else 'train_pipeline'
    assert len(user[key]) > 1 and all('type' in t for t in user[key])
    assert resolved
    assert not lines, f'{rel} reused by name:\n' + '\n'.join(lines)


def test_an_mmposenc_base_has_no_scope_and_host_bases_keep_theirs():
    """The mechanism (mmposenc.utils.config_package.register_base_scope): mmengine's
    ``Config._get_cfg_path`` answers scope None for ``mmposenc::`` as for a base named by path,
    and keeps ``'mmdet'`` for ``mmdet::``; registering again adds no second wrapper."""
    from mmengine.config import Config

    from mmposenc.utils.config_package import register_config_package
    register_config_package()
    func = Config.__dict__['_get_cfg_path'].__func__
    assert func.unscoped_mmposenc and not getattr(func.__wrapped__, 'unscoped_mmposenc', False)
    path, scope = Config._get_cfg_path('mmposenc::smoke/detr_r18_1xb2-8it_coco128.py', '')
    assert scope is None and osp.samefile(
        path, osp.join(CONFIG_ROOT, 'smoke', 'detr_r18_1xb2-8it_coco128.py'))
    assert Config._get_cfg_path('mmdet::_base_/default_runtime.py', '')[1] == 'mmdet'


FRESH = """
import json, sys
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1])
scopes = []
def walk(node):
    if isinstance(node, dict):
        if 'type' in node:
            scopes.append(node.get('_scope_'))
        [walk(v) for v in node.values()]
    elif isinstance(node, (list, tuple)):
        [walk(v) for v in node]
walk(cfg.to_dict())
print(json.dumps(dict(scopes=sorted(set(map(str, scopes))),
                      imported=sorted(m for m in sys.modules if m.split('.')[0] == 'mmposenc'))))
"""


def test_fresh_process_without_import_loads_the_base_unscoped(user_project):
    """In a fresh interpreter that never imports mmposenc (a host's entry point), the startup
    hook's registration carries the same fix: no dict of the user config is stamped
    ``_scope_='mmposenc'``; the host's own stamps (``mmdet``) stay."""
    import json
    import os
    import subprocess
    import sys
    cfg = user_project / 'fresh_smoke_reuse.py'
    cfg.write_text("_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'\n" + REUSE)
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH',
                                                            'MMPOSENC_NO_STARTUP_HOOK')}
    res = subprocess.run([sys.executable, '-W', 'ignore', '-c', FRESH, str(cfg)],
                         cwd=str(user_project), env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out['imported'] == []
    assert 'mmposenc' not in out['scopes'] and 'mmdet' in out['scopes'], out
