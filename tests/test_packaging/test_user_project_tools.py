"""A user's project outside the repository, with the editable install: a config with an
``mmposenc::`` base trained with ``mim train mmposenc`` (which runs our tools/train.py from
``mmposenc/.mim/tools``) and evaluated with our tools/test.py run as a script, both from that
project's folder (the first two rows of the README's "Use from your own project" table; the
wheel is tested in test_package_install.py).
"""
import os.path as osp
import sys

import pytest
from test_package_install import QUIET, _assert_mim_sees_the_repository, _env, _run

from conftest import REPO_ROOT

USER_CONFIG = """\
# a user's own config, outside the repository, inheriting ours through mmposenc::
_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)
model = dict(type='mmposenc.PEGDETR', encoder_pos='peg')
data_root = {root!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = dict(dataset=dict(data_root=data_root, indices=1))
val_dataloader = val_evaluator = val_cfg = None
test_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
train_cfg = dict(max_iters=2)
default_hooks = dict(checkpoint=dict(interval=2))
"""


@pytest.mark.slow
def test_our_train_and_test_scripts_run_a_user_config_with_an_mmposenc_base(
        tmp_path, coco128_root):
    """`PYTHONPATH=<repo> mim train mmposenc CONFIG` (how the README runs mim with the editable
    install: the repository's mmposenc.egg-info gives mim the source tree) runs our
    tools/train.py, which trains the user's model; `python <repo>/tools/test.py` evaluates the
    checkpoint (test.py sees no PYTHONPATH: the editable install's own mmposenc)."""
    import torch
    _assert_mim_sees_the_repository()
    project = tmp_path / 'my_project'
    project.mkdir()
    (project / 'peg_detr.py').write_text(
        USER_CONFIG.format(root=coco128_root.rstrip('/') + '/'))
    work_dir = str(project / 'work')
    res = _run([sys.executable, *QUIET, '-m', 'mim', 'train', 'mmposenc', 'peg_detr.py',
                '--work-dir', work_dir], cwd=str(project), env=_env(PYTHONPATH=REPO_ROOT))
    # mim ran our train.py from the source tree's mmposenc/.mim/tools (a link to tools/)
    assert osp.join(REPO_ROOT, 'mmposenc', '.mim', 'tools', 'train.py') in res.stdout, (
        res.stdout[-3000:])
    ckpt = osp.join(work_dir, 'iter_2.pth')
    state = torch.load(ckpt, map_location='cpu', weights_only=False)
    assert state['meta']['iter'] == 2
    # the user's model: the PEG version of our smoke DETR (mmdet's DETR-R18 has no PEG)
    assert any(k.startswith('encoder.pegs.0.') for k in state['state_dict'])
    res = _run([sys.executable, *QUIET, osp.join(REPO_ROOT, 'tools', 'test.py'), 'peg_detr.py',
                ckpt, '--work-dir', work_dir], cwd=str(project))
    assert 'coco/bbox_mAP:' in res.stdout + res.stderr
