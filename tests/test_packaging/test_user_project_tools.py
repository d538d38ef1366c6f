"""A user's project outside the repository: a config with an ``mmposenc::`` base trained with our
tools/train.py and evaluated with our tools/test.py, run as scripts from that project's folder
(the first row of the README's "Use from your own project" table; mim and the wheel are tested
in test_package_install.py).
"""
import os
import os.path as osp
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

USER_CONFIG = """\
# a user's own config, outside the repository, inheriting ours through mmposenc::
_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'
custom_imports = dict(imports=['mmposenc.models.detectors'], allow_failed_imports=False)
model = dict(type='mmposenc.PEGDETR', encoder_pos='peg')
data_root = {root!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
test_dataloader = dict(dataset=dict(data_root=data_root, indices=4))
val_dataloader = val_evaluator = val_cfg = None
test_evaluator = dict(ann_file=data_root + 'annotations/instances_train2017.json')
train_cfg = dict(max_iters=2)
default_hooks = dict(checkpoint=dict(interval=2))
"""


def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    env['OMP_NUM_THREADS'] = '1'
    res = subprocess.run([sys.executable, '-W', 'ignore', *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f'{args} failed:\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}'
    return res


@pytest.mark.slow
def test_our_train_and_test_scripts_run_a_user_config_with_an_mmposenc_base(
        tmp_path, coco128_root):
    import torch
    project = tmp_path / 'my_project'
    project.mkdir()
    (project / 'peg_detr.py').write_text(
        USER_CONFIG.format(root=coco128_root.rstrip('/') + '/'))
    work_dir = str(project / 'work')
    _run([osp.join(REPO_ROOT, 'tools', 'train.py'), 'peg_detr.py', '--work-dir', work_dir],
         cwd=str(project))
    ckpt = osp.join(work_dir, 'iter_2.pth')
    state = torch.load(ckpt, map_location='cpu', weights_only=False)
    assert state['meta']['iter'] == 2
    # the user's model: the PEG version of our smoke DETR (mmdet's DETR-R18 has no PEG)
    assert any(k.startswith('encoder.pegs.0.') for k in state['state_dict'])
    res = _run([osp.join(REPO_ROOT, 'tools', 'test.py'), 'peg_detr.py', ckpt,
                '--work-dir', work_dir], cwd=str(project))
    assert 'coco/bbox_mAP:' in res.stdout + res.stderr
