"""How the tests reach the repository's tools and studies, without editing ``sys.path``.

- :func:`load_tool`: a file of ``tools/`` as a module, loaded by its path (the tools are
  scripts, not a package);
- :func:`load_project`: a module of ``projects/`` (the studies: a package run as
  ``python -m projects.<study>.<driver>`` from the repository root), imported by its name;
- :func:`project_argv` / :func:`project_env`: a study's command line in a fresh process, from
  any working directory (the repository on ``PYTHONPATH``, as the studies start their own
  workers).

Examples:
    >>> run_all = load_tool('benchmark/run_all.py')
    >>> fs = load_project('common.fmnist_study')
"""
import importlib
import importlib.util
import os
import os.path as osp
import sys

REPO_ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
TOOLS_DIR = osp.join(REPO_ROOT, 'tools')
PROJECTS_DIR = osp.join(REPO_ROOT, 'projects')


def load_tool(rel, name=None):
    """``tools/<rel>`` as a module (loaded once per name, then the same module).

    Python runs a tool with its folder first on ``sys.path``; so does this while the tool's
    top-level code runs (a tool of ``tools/benchmark`` imports its neighbours by name), and
    ``sys.path`` is as before afterwards.

    Args:
        rel (str): The path below ``tools/``, e.g. ``'analysis/visualize_attention.py'``.
        name (str, optional): The module's name in ``sys.modules``. Defaults to the file name
            without ``.py``.

    Returns:
        module: The tool, its ``__name__`` not ``'__main__'`` (nothing of its command line ran).
    """
    path = osp.join(TOOLS_DIR, rel)
    name = name or osp.splitext(osp.basename(rel))[0]
    module = sys.modules.get(name)
    if module is not None and getattr(module, '__file__', None) == path:
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    sys.path.insert(0, osp.dirname(path))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        sys.path[:] = saved
    return module


def _projects_package():
    """The ``projects`` package of this checkout (imported from its folder, once)."""
    package = sys.modules.get('projects')
    if package is None or list(getattr(package, '__path__', [])) != [PROJECTS_DIR]:
        spec = importlib.util.spec_from_file_location(
            'projects', osp.join(PROJECTS_DIR, '__init__.py'),
            submodule_search_locations=[PROJECTS_DIR])
        package = importlib.util.module_from_spec(spec)
        sys.modules['projects'] = package
        spec.loader.exec_module(package)
    return package


def load_project(module):
    """``projects.<module>``, e.g. ``load_project('cpvt_ablations.cpvt_ablations')``."""
    _projects_package()
    return importlib.import_module(f'projects.{module}')


def project_argv(module, *args):
    """The command line of ``python -m projects.<module> ARGS...`` with this interpreter."""
    return [sys.executable, '-m', f'projects.{module}', *args]


def project_env(env=None):
    """``env`` (default: this process's environment) with the repository first on
    ``PYTHONPATH``: ``python -m projects...`` then runs in any working directory."""
    env = dict(os.environ if env is None else env)
    env['PYTHONPATH'] = os.pathsep.join(p for p in (REPO_ROOT, env.get('PYTHONPATH')) if p)
    return env
