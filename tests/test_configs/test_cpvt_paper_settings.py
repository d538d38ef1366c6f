"""The CPVT configs encode the settings of the paper rows they are compared with."""
import os.path as osp

import pytest
from mmengine.config import Config

from conftest import REPO_ROOT

CPVT_DIR = osp.join(REPO_ROOT, 'configs', 'cpvt')
ARCHS = {'tiny': '4xb256', 'small': '4xb256', 'base': '16xb64'}


@pytest.mark.parametrize('arch', sorted(ARCHS))
def test_cpvt_paper_settings(arch):
    sched = ARCHS[arch]
    single = Config.fromfile(osp.join(CPVT_DIR, f'cpvt-{arch}_{sched}_in1k.py')).model.backbone
    zero_to_five = Config.fromfile(osp.join(CPVT_DIR, f'cpvt-{arch}-0to5_{sched}_in1k.py')).model.backbone
    gap = Config.fromfile(osp.join(CPVT_DIR, f'cpvt-{arch}-gap_{sched}_in1k.py')).model
    assert tuple(single.peg_positions) == (0, )  # paper default: one PEG after encoder 0
    assert tuple(zero_to_five.peg_positions) == (0, 1, 2, 3, 4)
    # the paper's GAP rows use the 0-5 placement (the double dagger of [L] Table 3)
    assert tuple(gap.backbone.peg_positions) == (0, 1, 2, 3, 4)
    assert gap.backbone.out_type == 'avg_featmap'
