"""Every shipped config reused from a user's own folder as ``_base_ = 'mmposenc::<config>'``
builds every type as the same config inherited by path does.

For each config under ``configs/`` (the leaves and the ``_base_`` fragments) a user config of
one line, ``_base_ = 'mmposenc::<folder>/<file>.py'``, is written into a temporary folder outside
the repository and loaded with mmengine's ``Config``; the reference is the shipped file loaded
by path. Every dict with a ``type`` in the whole config (model and everything nested in it,
pipelines including TTA, dataloaders, optimizer, schedulers, loops, hooks, evaluators,
visualizer, ...) is resolved in the scope mmengine builds it in, as mmengine does:

* the scope of a dict is its own ``_scope_`` (``build_from_cfg`` pops it and makes it the default
  scope while the dict and everything nested in it is built), else the scope of the dict around
  it, else the config's ``default_scope``;
* in scope ``S`` an unscoped type is looked up in the registry ``root._search_child(S)`` and its
  parents (``Registry.switch_scope_and_registry``); where ``S`` has no registry of that kind,
  mmengine falls back to the registry ``build`` was called on, taken here as mmengine's root
  registry (what the Runner, Evaluator and Visualizer call); ``'pkg.X'`` resolves through the
  root registry's children wherever it is built;
* an unscoped type registered in an mmposenc registry is mmposenc's (``mmposenc.registry.
  Registry.build`` prefixes its own types whatever the default scope).

A type is resolved in every kind of registry (models, transforms, optimizers, ...); wherever the
reference resolves it, the user config must resolve it to the very same class. A type that
mmengine would not find (``KeyError: X is not in the mmposenc::model registry``), and a name
that exists both in mmengine's / mmcv's root registry and in a host (``LoadAnnotations``,
``Resize``, ``RandomFlip``: found in the root, the wrong class, without an error) both fail.
"""
import functools
import glob
import os.path as osp

import pytest

from conftest import REPO_ROOT

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


# --------------------------------------------------------------------------- resolution
@functools.lru_cache(maxsize=None)
def _root_registries():
    """mmengine's root registries by name, with the hosts' and mmposenc's children attached."""
    import mmdet.registry  # noqa: F401
    import mmengine.registry as mmengine_registry
    import mmpretrain.registry  # noqa: F401
    import mmseg.registry  # noqa: F401

    import mmposenc.registry  # noqa: F401
    return tuple(sorted((name, reg) for name, reg in vars(mmengine_registry).items()
                        if isinstance(reg, mmengine_registry.Registry) and reg.parent is None))


@functools.lru_cache(maxsize=None)
def resolve(obj_type, scope):
    """``{registry name: class}`` of ``obj_type`` built in ``scope``, for every kind of registry
    (None where that kind does not know it)."""
    found = {}
    for name, root in _root_registries():
        cls = None
        ours = root._search_child('mmposenc')
        if '.' not in obj_type and ours is not None:
            ours.import_from_location()
            cls = ours.module_dict.get(obj_type)  # mmposenc's Registry.build prefixes these
        if cls is None:
            registry = root._search_child(scope) if scope else None
            if registry is None:  # no registry of this kind in that scope: mmengine's fallback
                registry = root
            try:
                cls = registry.get(obj_type)
            except Exception:  # mmengine: RuntimeError('Failed to get ...'); ours: KeyError
                cls = None
        found[name] = cls
    return found


def typed_dicts(node, scope, path='', out=None):
    """``{path: (type, scope it is built in)}`` of every dict with a ``type`` under ``node``."""
    out = {} if out is None else out
    if isinstance(node, dict):
        if 'type' in node:
            scope = node.get('_scope_') or scope
            out[path] = (node['type'], scope)
        for key, value in node.items():
            typed_dicts(value, scope, f'{path}.{key}' if path else str(key), out)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            typed_dicts(value, scope, f'{path}[{i}]', out)
    return out


def _name(cls):
    return 'not found' if cls is None else f'{cls.__module__}.{cls.__qualname__}'


def mismatches(reference, user):
    """One line per type of ``user`` that does not resolve to the class it resolves to in
    ``reference`` (two loaded :class:`mmengine.Config` of the same structure), and the number of
    types of the reference that resolve."""
    ref = typed_dicts(reference.to_dict(), reference.get('default_scope'))
    got = typed_dicts(user.to_dict(), user.get('default_scope'))
    lines, resolved = [], 0
    for path, (obj_type, ref_scope) in ref.items():
        if path not in got:
            lines.append(f'{path}: missing from the user config')
            continue
        user_type, user_scope = got[path]
        if not isinstance(obj_type, str):  # a class or function itself: nothing to look up
            continue
        want, have = resolve(obj_type, ref_scope), resolve(user_type, user_scope)
        if any(want.values()):
            resolved += 1
        wrong = [(kind, cls) for kind, cls in want.items()
                 if cls is not None and have[kind] is not cls]
        for kind, cls in wrong:
            lines.append(f'{path}: {user_type!r} built in scope {user_scope!r} is '
                         f'{_name(have[kind])} in {kind}; by path (scope {ref_scope!r}) it is '
                         f'{_name(cls)}')
    return lines, resolved


# --------------------------------------------------------------------------- loading
@pytest.fixture(scope='module')
def user_project(tmp_path_factory):
    """A user's project folder outside the repository."""
    path = tmp_path_factory.mktemp('my_project')
    assert not str(path).startswith(REPO_ROOT)
    return path


@pytest.fixture(scope='module', autouse=True)
def _memoized_package_lookups():
    """Memoize what mmengine re-reads from the installed packages for every ``pkg::`` base.

    For each ``mmdet::`` / ``mmposenc::`` ... base of each config it parses, mmengine reloads
    ``pkg_resources`` (``is_installed``) and reads the package's whole model index (mmdet: ~100
    metafiles, ~0.3 s). Both depend only on the installed files, so each is read once here;
    the config loading itself (mmposenc's registration included) is mmengine's, unchanged.
    """
    import mmposenc  # noqa: F401  (registers mmposenc:: with mmengine's Config, as the hook does)
    from mmengine.config import config as config_module
    from mmengine.config import utils as config_utils

    def memo_yaml(load):  # mmengine only reads the loaded metafiles: no copies needed
        cached = functools.lru_cache(maxsize=None)(load)
        return lambda file, *args, **kwargs: (
            cached(file) if not args and not kwargs and str(file).endswith('.yml')
            else load(file, *args, **kwargs))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config_module, 'is_installed',
                   functools.lru_cache(maxsize=None)(config_module.is_installed))
        mp.setattr(config_utils, 'load', memo_yaml(config_utils.load))
        yield


def _load_pair(user_project, rel, body='', prefix=''):
    """(by path, as a user's ``mmposenc::`` base) for the config ``rel`` followed by ``body``."""
    from mmengine.config import Config
    name = prefix + rel.replace('/', '__')
    user = user_project / name
    user.write_text(f"_base_ = 'mmposenc::{rel}'\n{body}")
    reference = user_project / ('by_path__' + name)
    reference.write_text(f'_base_ = {osp.join(CONFIG_ROOT, rel)!r}\n{body}')
    return Config.fromfile(str(reference)), Config.fromfile(str(user))


@pytest.mark.parametrize('rel', CONFIGS)
def test_every_type_resolves_as_by_path(rel, user_project, monkeypatch):
    monkeypatch.chdir(user_project)
    reference, user = _load_pair(user_project, rel)
    lines, resolved = mismatches(reference, user)
    assert resolved, f'{rel}: no type of the config resolves by path'
    assert not lines, (f"_base_ = 'mmposenc::{rel}' builds {len(lines)} type(s) otherwise than "
                       'by path:\n' + '\n'.join(lines))


def test_every_shipped_config_is_covered():
    assert len(CONFIGS) > 100
    assert any('/_base_/' in rel for rel in CONFIGS)  # fragments are reused too


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
