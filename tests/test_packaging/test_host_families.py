"""Installing mmposenc into an environment of either host family changes nothing installed
there, and a missing or out-of-range host stops `import` with one line.

- The wheel (and its `upstream` / `onedl` extras) installed by pip, with its requirements
  resolved (no ``--no-deps``) and no index (so nothing can be fetched), into virtual
  environments that hold one family each: ``pip freeze`` before and after differs by
  ``mmposenc`` alone. The environments hold the families' distribution metadata (name,
  version, requirements none), which is all pip's resolver reads.
- ``pip install --dry-run`` of the wheel into this very environment (the stack the suite runs
  on, real packages) would install nothing but mmposenc.
- A host module of the wrong version or missing: ``import mmposenc`` / ``mmposenc.models.detectors``
  ends with one line naming the module, the supported range and both distributions.
"""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from stack_info import pins

pytestmark = pytest.mark.xdist_group('wheel_environment')

#: family -> the distributions (pinned versions) a user's environment of it holds
FAMILIES = {
    'upstream': ['torch', 'torchvision', 'numpy', 'setuptools', 'mmengine', 'mmcv', 'mmdet',
                 'mmsegmentation', 'mmpretrain', 'ftfy', 'regex'],
    'upstream-lite': ['torch', 'torchvision', 'numpy', 'setuptools', 'mmengine', 'mmcv-lite',
                      'mmdet', 'mmsegmentation', 'mmpretrain', 'ftfy', 'regex'],
    'onedl': ['torch', 'torchvision', 'numpy', 'setuptools', 'onedl-mmengine', 'onedl-mmcv',
              'onedl-mmdetection', 'onedl-mmsegmentation', 'onedl-mmpretrain', 'ftfy', 'regex'],
}


def _run(args, **kwargs):
    res = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert res.returncode == 0, f'{args}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}'
    return res


@pytest.fixture(scope='module')
def wheel(tmp_path_factory):
    """mmposenc's wheel, built by pip from a copy of the source."""
    from test_startup_hook import _copy_source
    tmp = tmp_path_factory.mktemp('host_families')
    src, dist = str(tmp / 'src'), str(tmp / 'dist')
    _copy_source(src)
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
          '--disable-pip-version-check', '-w', dist, src], cwd=str(tmp))
    found, = [osp.join(dist, f) for f in os.listdir(dist) if f.endswith('.whl')]
    return found


def _family_environment(root, family):
    """A venv without pip holding the metadata of ``family``'s distributions at the pinned
    versions (requirements/upstream.txt or onedl.txt)."""
    venv = osp.join(root, family)
    _run([sys._base_executable, '-m', 'venv', '--without-pip', venv])
    py = osp.join(venv, 'bin', 'python')
    site = _run([py, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])']
                ).stdout.strip()
    pinned = pins('onedl' if family == 'onedl' else 'upstream')
    for name in FAMILIES[family]:
        version = pinned[name]
        info = osp.join(site, f'{name.replace("-", "_")}-{version}.dist-info')
        os.makedirs(info)
        files = {'METADATA': f'Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n',
                 'INSTALLER': 'pip\n', 'RECORD': ''}
        for fname, text in files.items():
            with open(osp.join(info, fname), 'w') as f:
                f.write(text)
    return py


def _freeze(py):
    out = _run([sys.executable, '-m', 'pip', '--python', py, 'freeze', '--all',
                '--disable-pip-version-check']).stdout
    return sorted(line for line in out.splitlines() if line.strip())


@pytest.mark.parametrize('family,extra', [
    ('upstream', ''), ('upstream-lite', ''), ('onedl', ''),
    ('upstream-lite', '[upstream]'), ('onedl', '[onedl]')])
def test_installing_the_wheel_changes_nothing_the_family_installed(wheel, tmp_path, family,
                                                                    extra):
    py = _family_environment(str(tmp_path), family)
    before = _freeze(py)
    _run([sys.executable, '-m', 'pip', '--python', py, 'install', '--no-index',
          '--disable-pip-version-check', wheel + extra])
    after = _freeze(py)
    assert set(before) <= set(after), sorted(set(before) - set(after))
    new, = set(after) - set(before)  # 'mmposenc @ file:///...whl' (installed from a path)
    assert new.startswith('mmposenc @ file://') and osp.basename(wheel) in new, new


def test_the_wheel_would_install_nothing_else_here(wheel, tmp_path):
    """This environment, real packages of the stack the suite runs on."""
    report = tmp_path / 'report.json'
    _run([sys.executable, '-m', 'pip', 'install', '--dry-run', '--no-index',
          '--disable-pip-version-check', '--report', str(report), wheel])
    # mmposenc itself may count as installed already (this environment's editable install)
    names = [item['metadata']['name'] for item in json.load(open(report))['install']]
    assert set(names) <= {'mmposenc'}, names


FAKE_HOST = '''
import sys
sys.path.insert(0, {fake!r})
try:
    import {module}
except ImportError as exc:
    print(type(exc).__name__ + ': ' + str(exc))
'''


@pytest.mark.parametrize('module,host,version,needed_by', [
    ('mmposenc', 'mmengine', '0.9.1', 'mmposenc'),
    ('mmposenc', 'mmcv', '2.4.0', 'mmposenc'),
    ('mmposenc.models.detectors', 'mmdet', '3.2.0', 'mmposenc.models.detectors'),
    ('mmposenc.models.detectors', 'mmdet', None, 'mmposenc.models.detectors'),
])
def test_a_host_out_of_range_or_missing_stops_the_import_in_one_line(tmp_path, module, host,
                                                                     version, needed_by):
    """A fake host module first on sys.path (or an empty module hiding it): the import fails
    with one line that names the module, the supported range and the distributions of both
    families."""
    from mmposenc.utils.hosts import SUPPORTED, supported_range
    fake = tmp_path / 'fake'
    (fake / host).mkdir(parents=True)
    if version is None:  # `import mmdet` finds nothing: a package that raises as absent
        (fake / host / '__init__.py').write_text(
            f'raise ModuleNotFoundError("No module named {host!r}", name={host!r})\n')
    else:
        (fake / host / '__init__.py').write_text(f'__version__ = {version!r}\n')
    env = dict(os.environ, MMPOSENC_NO_STARTUP_HOOK='1')
    res = _run([sys.executable, '-c', FAKE_HOST.format(fake=str(fake), module=module)],
               cwd=REPO_ROOT, env=env)
    line, = res.stdout.strip().splitlines()
    assert line.startswith('HostVersionError: ' + needed_by + ' needs ' + supported_range(host))
    assert (f'found {host} {version}' in line) if version else ('not installed' in line)
    for dist in SUPPORTED[host][2].values():
        assert dist in line
