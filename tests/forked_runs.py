"""Run several tools as ``python <tool> <args>`` would, in fresh processes that share the cost
of importing torch / mmengine / mmdet: one interpreter imports the modules named in ``preload``
(never mmposenc), then forks one child per run; each child changes to the run's folder, sets
``sys.path[0]`` and ``sys.argv`` as the interpreter does, runs the tool as ``__main__`` with its
stdout / stderr in files, reports an uncaught exception through ``sys.excepthook`` (the
interpreter's way, so a tool's own hook applies), runs the ``atexit`` handlers and exits with
the tool's exit status. The runs go one after the other, in order (a later run can read an
earlier one's outputs).

For tests of what a tool does from its command line (outputs, messages, exit status). Not for
what depends on the interpreter's startup (the startup hook, install modes, what a tool imports
first): those need a process of their own (``subprocess.run([sys.executable, ...])``).

Example:
    >>> res, = run_tools([dict(argv=['tools/train.py', 'nope.py'], cwd=str(tmp_path))])
    >>> res.returncode, res.stderr  # a subprocess.CompletedProcess
"""
import json
import os
import subprocess
import sys
import tempfile

SERVER = r'''
import atexit, importlib, json, os, runpy, sys
runs, preload, out_dir = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
for name in preload:
    importlib.import_module(name)
assert 'mmposenc' not in sys.modules, 'the preloaded modules imported mmposenc'
base_path, results = sys.path[1:], []
for i, run in enumerate(runs):
    out, err = (os.path.join(out_dir, f'{i}.{s}') for s in ('out', 'err'))
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.chdir(run['cwd'])
        os.environ.update(run.get('env', {}))
        sys.path[:] = [os.path.dirname(os.path.abspath(run['argv'][0]))] + base_path
        sys.argv = list(run['argv'])
        code = 0
        try:
            runpy.run_path(run['argv'][0], run_name='__main__')
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
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


def run_tools(runs, preload=('torch', 'mmengine.config', 'mmengine.runner'), env=None,
              timeout=900):
    """Run each of ``runs`` (dicts: ``argv`` = [tool path, *arguments], ``cwd``, optional
    ``env`` added to the environment) in a forked fresh process, one after the other.

    Args:
        runs (list[dict]): The runs, in order.
        preload (Sequence[str]): Modules the parent imports before it forks (never mmposenc).
        env (dict, optional): Environment of the parent (default: this process's).
        timeout (float): Seconds for all runs together.

    Returns:
        list[subprocess.CompletedProcess]: One per run: ``returncode``, ``stdout``, ``stderr``.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        res = subprocess.run(
            [sys.executable, '-c', SERVER, json.dumps(runs), json.dumps(list(preload)), out_dir],
            capture_output=True, text=True, timeout=timeout, env=env, cwd=out_dir)
        if res.returncode != 0:
            raise RuntimeError(f'the forking interpreter failed:\n{res.stderr[-4000:]}')
        codes = json.loads(res.stdout.splitlines()[-1])
        done = []
        for i, (run, code) in enumerate(zip(runs, codes)):
            with open(os.path.join(out_dir, f'{i}.out')) as out, \
                    open(os.path.join(out_dir, f'{i}.err')) as err:
                done.append(subprocess.CompletedProcess(run['argv'], code, out.read(),
                                                        err.read()))
        return done
