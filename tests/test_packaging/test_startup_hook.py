"""The startup hook: `_base_ = 'mmposenc::...'` through the hosts' own entry points.

mmposenc installs ``mmposenc-startup.pth`` into site-packages (regular and editable installs);
at interpreter start it puts one finder in front of ``sys.meta_path``, which registers mmposenc
with mmengine's config loader when ``mmengine.config`` is imported (``_mmposenc_startup.py``).
Every run here is a fresh Python process that never imports mmposenc itself:

- what the hook costs: the modules an interpreter imports at startup (one more: the hook),
  nothing imported when it registers (no mmposenc, no torch), the finder gone afterwards, the
  off switch ``MMPOSENC_NO_STARTUP_HOOK=1``; timings: tools/benchmark/startup_hook_cost.py;
- that the editable wheel (``pip install -e .``, as tools/setup_env.sh installs) and the regular
  wheel both install it, and that a half-uninstalled or broken hook never breaks Python;
- a user config in a folder outside the repository with an ``mmposenc::`` base, through
  mmdet's / mmseg's / mmpretrain's ``tools/train.py`` and ``tools/test.py`` (as shipped in
  their wheels, ``<host>/.mim/tools``), ``mim train <host>``, and ``DetInferencer``,
  ``MMSegInferencer`` and ``ImageClassificationInferencer`` on one real image, with the
  editable install (this virtual environment) and with the wheel in a throwaway environment.
"""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import zipfile

import pytest
from test_package_install import QUIET, VENV_SITE, _copy_source, _env, _run

from conftest import REPO_ROOT

PTH = 'mmposenc-startup.pth'
HOOK = '_mmposenc_startup'
OFF = 'MMPOSENC_NO_STARTUP_HOOK'
REFUSED = 'AssertionError: mmengine does not support to load mmposenc config.'


def _py(args, python=sys.executable, cwd=None, off=False, check=True, **extra):
    """``python -W ignore args`` in a fresh process, no PYTHONPATH; ``off`` sets the switch."""
    env = _env(**extra)
    env.pop(OFF, None)
    if off:
        env[OFF] = '1'
    return _run([python, *QUIET, *args], cwd=cwd or REPO_ROOT, env=env, check=check)


def _editable_python():
    """This virtual environment's interpreter, after checking that its editable mmposenc was
    installed with the hook (an install older than the hook lacks the .pth)."""
    if not osp.isfile(osp.join(VENV_SITE, PTH)):
        pytest.fail(f'{osp.join(VENV_SITE, PTH)} is missing: mmposenc was installed without '
                    'its startup hook; run tools/setup_env.sh (it reinstalls mmposenc)')
    return sys.executable


# ------------------------------------------------------------------ the editable wheel -------
def test_the_editable_wheel_holds_the_startup_hook(tmp_path):
    """setuptools' PEP 660 build (what `pip install -e .` runs): the wheel holds our .pth at
    its root, byte for byte, beside setuptools' own finder, which maps the hook module to the
    source tree."""
    src = str(tmp_path / 'src')
    _copy_source(src)
    code = ('import sys; from setuptools import build_meta\n'
            'print(build_meta.build_editable(sys.argv[1]))')
    name = _run([sys.executable, *QUIET, '-c', code, str(tmp_path / 'dist')],
                cwd=src).stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(str(tmp_path / 'dist' / name)) as wheel:
        names = wheel.namelist()
        assert PTH in names, names
        assert wheel.read(PTH) == open(osp.join(REPO_ROOT, PTH), 'rb').read()
        finder, = [n for n in names if n.startswith('__editable__') and n.endswith('finder.py')]
        mapping = wheel.read(finder).decode()
    assert f"'{HOOK}': '{osp.join(src, HOOK)}'" in mapping, mapping


# ------------------------------------------------------------------ startup and cost ---------
STARTUP = """\
import json, sys
print(json.dumps(dict(modules=sorted(sys.modules),
                      finders=[type(f).__name__ for f in sys.meta_path],
                      hook=getattr(sys.modules.get('_mmposenc_startup'), '__file__', None))))
"""


def _startup(python, **kw):
    return json.loads(_py(['-c', STARTUP], python=python, **kw).stdout)


def test_at_startup_the_hook_imports_itself_only():
    """With the hook, `python -c ...` imports one module more than without (the hook's own,
    from the source tree for the editable install) and puts one finder first; nothing of
    mmengine, torch or mmposenc. The off switch leaves the interpreter as without the hook."""
    python = _editable_python()
    on, off = _startup(python), _startup(python, off=True)
    assert set(on['modules']) - set(off['modules']) == {HOOK}
    assert set(off['modules']) <= set(on['modules'])
    assert not [m for m in on['modules'] if m.split('.')[0] in ('mmengine', 'torch', 'mmposenc')]
    assert on['finders'] == ['MMEngineConfigFinder'] + off['finders']
    assert on['hook'] == osp.join(REPO_ROOT, HOOK + '.py') and off['hook'] is None


AFTER_MMENGINE = """\
import json, sys
before = set(sys.modules)
import mmengine.config
from mmengine.config import config
from mmengine.config.utils import MODULE2PACKAGE
module = sys.modules['mmengine.config']
print(json.dumps(dict(
    registered=MODULE2PACKAGE.get('mmposenc'),
    folder=config.get_installed_path('mmposenc') if 'mmposenc' in MODULE2PACKAGE else None,
    mmdet=config.get_installed_path('mmdet'),
    new=sorted(set(sys.modules) - before),
    loader=type(module.__loader__).__name__,
    spec_loader_is_loader=module.__spec__.loader is module.__loader__,
    finders=[type(f).__name__ for f in sys.meta_path])))
"""


def test_importing_mmengine_config_registers_mmposenc():
    """`import mmengine.config` registers `mmposenc` (the package folder of the editable
    install: the source tree) and imports only the hook's copy of config_package.py beyond
    what mmengine imports without the hook; mmengine.config keeps its own loader, and the
    finder takes itself out (later imports do not pass through it)."""
    python = _editable_python()
    on = json.loads(_py(['-c', AFTER_MMENGINE], python=python).stdout)
    off = json.loads(_py(['-c', AFTER_MMENGINE], python=python, off=True).stdout)
    assert on['registered'] == 'mmposenc' and off['registered'] is None
    assert on['folder'] == osp.join(REPO_ROOT, 'mmposenc')
    assert on['mmdet'] == off['mmdet']
    assert set(on['new']) - set(off['new']) == {'_mmposenc_config_package'}
    assert not [m for m in on['new'] if m.split('.')[0] in ('mmposenc', 'torch')]
    assert on['loader'] == off['loader'] == 'SourceFileLoader'
    assert on['spec_loader_is_loader']
    assert 'MMEngineConfigFinder' not in on['finders'] and on['finders'] == off['finders']


USER_CONFIG = """\
# a user's own config, outside the repository
_base_ = 'mmposenc::peg_detr/detr-peg_r50_16xb2-50e_coco.py'
model = dict(peg_after=(0, 1))
"""
PARSE = """\
import sys
from mmengine.config import Config
cfg = Config.fromfile(sys.argv[1], import_custom_modules=False)
print(cfg.model.type, cfg.model.peg_after, 'mmposenc' in sys.modules)
"""


def test_user_config_parses_without_importing_mmposenc_and_the_off_switch(tmp_path):
    """A user config with an `mmposenc::` base parses in a fresh process that never imports
    mmposenc (the package stays unimported); with MMPOSENC_NO_STARTUP_HOOK=1 mmengine refuses
    it as it does without the hook."""
    python = _editable_python()
    (tmp_path / 'user.py').write_text(USER_CONFIG)
    res = _py(['-c', PARSE, 'user.py'], python=python, cwd=str(tmp_path))
    assert res.stdout.split('\n')[0] == 'mmposenc.PEGDETR (0, 1) False', res.stdout
    res = _py(['-c', PARSE, 'user.py'], python=python, cwd=str(tmp_path), off=True,
              check=False)
    assert res.returncode != 0 and REFUSED in res.stderr, res.stderr[-2000:]


# ------------------------------------------------------------------ robustness ---------------
# Python's `site` runs the .pth of a site folder in addsitedir; here the folder holds the .pth
# and what is left of an install. -S: no other site folder; this venv's site-packages is added
# as a plain path (its .pth files, the editable mmposenc's finder among them, do not run).
ADDSITE = """\
import site, sys, warnings
sys.path.append({venv_site!r})
site.addsitedir(sys.argv[1])
warnings.simplefilter('always')
with warnings.catch_warnings(record=True) as caught:
    import mmengine.config
from mmengine.config.utils import MODULE2PACKAGE
from mmengine.config import config
print('hook' if '_mmposenc_startup' in sys.modules else 'no hook',
      config.get_installed_path('mmposenc') if 'mmposenc' in MODULE2PACKAGE else 'unregistered',
      'mmposenc imported' if 'mmposenc' in sys.modules else 'mmposenc not imported')
print([str(w.message) for w in caught if 'mmposenc' in str(w.message)])
"""
BROKEN = {
    # what is in the site folder besides the .pth
    'module gone': {},
    'module broken': {HOOK + '.py': 'def install(:\n'},
    'package gone': {HOOK + '.py': None},
    'package present': {HOOK + '.py': None,
                        'mmposenc/__init__.py': 'raise ImportError("the hook imported me")\n',
                        'mmposenc/utils/config_package.py': None},
    'config_package broken': {HOOK + '.py': None,
                              'mmposenc/__init__.py': '',
                              'mmposenc/utils/config_package.py': 'raise OSError("half gone")\n'},
}


@pytest.mark.parametrize('case', list(BROKEN))
def test_a_half_uninstalled_hook_never_breaks_python(tmp_path, case):
    """The .pth left behind without its module, a broken module, mmposenc uninstalled: Python
    starts and imports mmengine.config silently. With mmposenc's files there the hook
    registers them without importing the package; when their registration raises, mmengine
    still loads and one warning says what failed and how to turn the hook off."""
    site_dir = tmp_path / 'site'
    site_dir.mkdir()
    shutil.copy(osp.join(REPO_ROOT, PTH), site_dir)
    for rel, text in BROKEN[case].items():
        path = site_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            shutil.copy(osp.join(REPO_ROOT, rel), path)
        else:
            path.write_text(text)
    res = _run([sys.executable, '-S', *QUIET, '-c', ADDSITE.format(venv_site=VENV_SITE),
                str(site_dir)], cwd=str(tmp_path))
    state, warned = res.stdout.strip().split('\n')
    assert 'Error processing line' not in res.stderr and 'Traceback' not in res.stderr
    expected = {
        'module gone': 'no hook unregistered mmposenc not imported',
        'module broken': 'no hook unregistered mmposenc not imported',
        'package gone': 'hook unregistered mmposenc not imported',
        'package present': f'hook {site_dir / "mmposenc"} mmposenc not imported',
        'config_package broken': 'hook unregistered mmposenc not imported',
    }[case]
    assert state == expected
    if case == 'config_package broken':
        assert 'OSError: half gone' in warned and f'{OFF}=1' in warned, warned
    else:
        assert warned == '[]'
