"""``mim search mmposenc`` from an editable install (issue 33, item 4).

mim (openmim 0.3.9) finds a package's ``.mim/model-index.yml`` under
``<distribution location>/<package>``, else under the location joined with the first name of
the distribution's ``top_level.txt``. A PEP 660 editable install keeps only its metadata in
site-packages, and ``top_level.txt`` sorts ``_mmposenc_startup`` first: mim looked for
``site-packages/_mmposenc_startup/model-index.yml``. The startup hook (_mmposenc_startup.py)
makes mim's ``get_installed_path('mmposenc')`` the folder Python imports mmposenc from.
"""
import importlib.util
import os.path as osp
import subprocess
import sys
import types

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, REPO_ROOT)
try:
    import _mmposenc_startup as hook
finally:
    sys.path.pop(0)


def test_patched_get_installed_path_answers_the_imported_package():
    calls = []

    def get_installed_path(package):
        calls.append(package)
        return f'/site-packages/{package}'
    mim_utils = types.SimpleNamespace(get_installed_path=get_installed_path)
    hook.patch_mim(mim_utils)
    spec = importlib.util.find_spec('mmposenc')
    assert mim_utils.get_installed_path('mmposenc') == list(spec.submodule_search_locations)[0]
    assert mim_utils.get_installed_path('mmdet') == '/site-packages/mmdet'
    assert calls == ['mmdet']
    patched = mim_utils.get_installed_path
    hook.patch_mim(mim_utils)  # once
    assert mim_utils.get_installed_path is patched


MIM = osp.join(osp.dirname(sys.executable), 'mim')


@pytest.mark.skipif(not osp.isfile(MIM) or importlib.util.find_spec('mim') is None,
                    reason='openmim is not installed')
def test_mim_search_lists_the_model_index(tmp_path):
    """``mim search mmposenc`` as a user runs it, outside the repository, in this
    environment (here an editable install, where it failed before)."""
    res = subprocess.run([MIM, 'search', 'mmposenc', '--valid-config'], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert 'detr-peg_r50_16xb2-50e_coco' in res.stdout, res.stdout[-3000:]
