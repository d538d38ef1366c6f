"""Which class a config's ``type`` builds, in the scope mmengine builds it in.

Shared by tests/test_configs/test_mmposenc_base_reuse.py (every shipped config reused as an
``mmposenc::`` base resolves as by path) and test_mmposenc_base_train_step.py (the built
pipelines are those classes). The rules mimic mmengine 0.10.7 and mmposenc.registry:

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

A type is resolved in every kind of registry (models, transforms, optimizers, ...).
"""
import functools


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
