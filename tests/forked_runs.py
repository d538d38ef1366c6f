"""Run several tools as ``python <tool> <args>`` would, in fresh processes that share the cost
of importing torch / mmengine / mmdet: one interpreter imports the modules named in ``preload``
(never mmposenc), then forks one child per run; each child changes to the run's folder, sets
``sys.path[0]`` and ``sys.argv`` as the interpreter does, runs the tool as ``__main__`` with its
stdout / stderr in files, reports an uncaught exception through ``sys.excepthook`` (the
interpreter's way, so a tool's own hook applies), runs the ``atexit`` handlers and exits with
the tool's exit status. The runs go one after the other, in order (a later run can read an
earlier one's outputs). A run can also be a snippet, run as ``python -c CODE <args>`` runs it
(``sys.path[0]`` the working directory, ``sys.argv[0] == '-c'``, a fresh ``__main__``).

The forking interpreter is a fresh process of its own: any interpreter (``python``: another
environment's), with interpreter options (``options``, e.g. ``-W ignore``) and with mmposenc's
startup hook on or off (``startup_hook``; the hook runs at the interpreter's start, so a run
cannot change it). Its children start from its state: what a fresh interpreter would have after
importing ``preload``.

For tests of what a tool does from its command line (outputs, messages, exit status), and of
what a fresh interpreter of an install does after its startup (the startup hook's work when a
tool imports mmengine, an inferencer in a process that never imported mmposenc). Not for what
depends on the interpreter's startup itself (which modules the hook imports, install modes'
``sys.meta_path``, what a tool imports first) or on a user's launcher (``mim train`` starts
``python train.py`` itself): those need a process of their own
(``subprocess.run([sys.executable, ...])``).

:func:`run_in_process` runs a tool's command line in this process the same way (no fork; the
working directory, ``sys.argv``, ``sys.path`` and the environment restored afterwards), for
tools whose imports this process already holds.

Example:
    >>> res, = run_tools([dict(argv=['tools/train.py', 'nope.py'], cwd=str(tmp_path))])
    >>> res.returncode, res.stderr  # a subprocess.CompletedProcess
    >>> res, = run_tools([dict(code='import sys; print(sys.argv)', argv=['x'], cwd='.')],
    ...                  preload=('mmengine.config', ), startup_hook=False)
"""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

#: the environment variable that turns mmposenc's startup hook off (_mmposenc_startup.py)
HOOK_OFF = 'MMPOSENC_NO_STARTUP_HOOK'

# what a child does, as the interpreter does for ``python <tool> <args>`` / ``python -c``
# (shared by the forking interpreter and run_in_process)
RUN_AS_MAIN = r'''
def run_as_main(run, base_path, catch=True):
    """Run ``run`` (``argv``: [tool, *args] or, with ``code``, the arguments after
    ``-c CODE``) as the interpreter would; return the exit status (``catch=False``: let its
    SystemExit or exception propagate instead)."""
    import os, runpy, sys, types
    os.chdir(run['cwd'])
    os.environ.update(run.get('env', {}))
    code = 0
    try:
        if 'code' in run:
            sys.path[:] = [''] + base_path
            sys.argv = ['-c', *run.get('argv', [])]
            main = types.ModuleType('__main__')
            main.__builtins__ = __builtins__
            saved_main, sys.modules['__main__'] = sys.modules.get('__main__'), main
            try:
                exec(compile(run['code'], '<string>', 'exec'), main.__dict__)
            finally:
                sys.modules['__main__'] = saved_main
        else:
            sys.path[:] = [os.path.dirname(os.path.abspath(run['argv'][0]))] + base_path
            sys.argv = list(run['argv'])
            runpy.run_path(run['argv'][0], run_name='__main__')
    except SystemExit as exc:
        if not catch:
            raise
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        if not catch:
            raise
        sys.excepthook(*sys.exc_info())
        code = 1
    return code
'''

# yapf's formatting of a config text memoized on (text, style) (a Runner formats its config 4-5
# times; yapf's output depends on those alone): tests/conftest.py for the suite's process, the
# forking interpreter of run_tools(memoize_formatting=True) for its children
MEMO_FORMAT = r'''
def format_code_owner():
    """The module whose ``FormatCode`` mmengine's ``Config.pretty_text`` calls: mmengine's
    config module (mmengine 0.10.7 imports it there), else yapf's API module (onedl-mmengine
    imports it from there at each call)."""
    from mmengine.config import config as config_module
    if hasattr(config_module, 'FormatCode'):
        return config_module
    from yapf.yapflib import yapf_api
    return yapf_api


def memoized_format_code(format_code, maxsize):
    """``format_code`` (mmengine's ``FormatCode``) with its results cached per text and style."""
    import functools

    @functools.lru_cache(maxsize=maxsize)
    def cached(text, style):
        return format_code(text, style_config=dict(style))

    def memo_format(text, style_config=None, **kwargs):
        if kwargs or not isinstance(style_config, dict):
            return format_code(text, style_config=style_config, **kwargs)
        return cached(text, tuple(sorted(style_config.items())))
    return memo_format
'''

SERVER = RUN_AS_MAIN + MEMO_FORMAT + r'''
import atexit, importlib, json, os, sys
runs, preload, out_dir = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
for name in preload:
    importlib.import_module(name)
assert 'mmposenc' not in sys.modules, 'the preloaded modules imported mmposenc'
if sys.argv[4:] == ['memoize_formatting']:  # see run_tools
    owner = format_code_owner()
    owner.FormatCode = memoized_format_code(owner.FormatCode, 64)
base_path, results = sys.path[1:], []
for i, run in enumerate(runs):
    out, err = (os.path.join(out_dir, f'{i}.{s}') for s in ('out', 'err'))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        code = run_as_main(run, base_path)
        try:
            atexit._run_exitfuncs()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    results.append(os.waitstatus_to_exitcode(status))
print(json.dumps(results))
'''

_NAMESPACE = {}
exec(RUN_AS_MAIN + MEMO_FORMAT, _NAMESPACE)  # this process's copy of the children's code
memoized_format_code = _NAMESPACE['memoized_format_code']
format_code_owner = _NAMESPACE['format_code_owner']


def hook_env(on, env=None):
    """``env`` (default: this process's environment) with mmposenc's startup hook switched
    ``on`` (the switch removed) or off (``MMPOSENC_NO_STARTUP_HOOK=1``)."""
    env = dict(os.environ if env is None else env)
    env.pop(HOOK_OFF, None)
    if not on:
        env[HOOK_OFF] = '1'
    return env


def run_tools(runs, preload=('torch', 'mmengine.config', 'mmengine.runner'), env=None,
              timeout=900, python=None, options=(), startup_hook=None,
              memoize_formatting=False):
    """Run each of ``runs`` in a forked fresh process, one after the other.

    Args:
        runs (list[dict]): The runs, in order: ``argv`` = [tool path, *arguments] (or, with
            ``code``, the arguments of ``python -c CODE``), ``cwd``, optional ``env`` added to
            the environment.
        preload (Sequence[str]): Modules the parent imports before it forks (never mmposenc).
        env (dict, optional): Environment of the parent (default: this process's).
        timeout (float): Seconds for all runs together.
        python (str, optional): The interpreter (default: this one, ``sys.executable``).
        options (Sequence[str]): Interpreter options, e.g. ``('-W', 'ignore')``.
        startup_hook (bool, optional): mmposenc's startup hook on (True) or off (False) in
            the parent's environment; None leaves ``env`` as it is.
        memoize_formatting (bool): Memoize, in each child, the yapf formatting of
            ``Config.pretty_text`` on its unformatted text, as tests/conftest.py does in the
            test process: a Runner formats its whole config 4-5 times (logged, dumped,
            runtime info, checkpoint meta; ~1 CPU-s each for a detector) and formats it once
            then. yapf's output depends on the text and the style alone, so the tool's
            output is the same; for runs whose point is not what a tool does at every step
            of its own process (the runs a user starts stay unpatched).

    Returns:
        list[subprocess.CompletedProcess]: One per run: ``returncode``, ``stdout``, ``stderr``.
    """
    if startup_hook is not None:
        env = hook_env(startup_hook, env)
    with tempfile.TemporaryDirectory() as out_dir:
        res = subprocess.run(
            [python or sys.executable, *options, '-c', SERVER, json.dumps(runs),
             json.dumps(list(preload)), out_dir,
             *(['memoize_formatting'] if memoize_formatting else [])],
            capture_output=True, text=True, timeout=timeout, env=env, cwd=out_dir)
        if res.returncode != 0:
            raise RuntimeError(f'the forking interpreter failed:\n{res.stderr[-4000:]}')
        codes = json.loads(res.stdout.splitlines()[-1])
        done = []
        for i, (run, code) in enumerate(zip(runs, codes)):
            with open(os.path.join(out_dir, f'{i}.out')) as out, \
                    open(os.path.join(out_dir, f'{i}.err')) as err:
                done.append(subprocess.CompletedProcess(run.get('argv', ['-c']), code,
                                                        out.read(), err.read()))
        return done


def run_in_process(run, capture=True):
    """Run ``run`` (a dict as for :func:`run_tools`) in this process, as a forked child would;
    the working directory, ``sys.argv``, ``sys.path``, the environment and (where this process
    has imported torch) torch's thread count and random state are restored afterwards (what the
    tool imported stays imported).

    Args:
        run (dict): The run.
        capture (bool): Capture its stdout / stderr and its exit status as a child would; with
            False its output goes to this process's and its SystemExit or exception propagates
            (what it would have ended with), for tests that read the exception.

    Returns:
        subprocess.CompletedProcess: ``returncode``, ``stdout``, ``stderr`` (with
        ``capture=False``: only a run that ended normally returns, status 0, no output).
    """
    saved = os.getcwd(), sys.argv, list(sys.path), dict(os.environ)
    torch = sys.modules.get('torch')
    threads = torch.get_num_threads() if torch else None
    out, err = io.StringIO(), io.StringIO()
    try:
        rng = torch.random.fork_rng() if torch else contextlib.nullcontext()
        with rng:
            code = _run_captured(run, saved[2][1:], capture, out, err)
    finally:
        os.chdir(saved[0])
        sys.argv, sys.path[:] = saved[1], saved[2]
        os.environ.clear()
        os.environ.update(saved[3])
        if torch:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(run.get('argv', ['-c']), code, out.getvalue(),
                                       err.getvalue())


def _run_captured(run, base_path, capture, out, err):
    """``run_as_main`` with its stdout / stderr in ``out`` / ``err`` (``capture``), or
    uncaught."""
    if capture:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return _NAMESPACE['run_as_main'](run, base_path)
    return _NAMESPACE['run_as_main'](run, base_path, catch=False)
