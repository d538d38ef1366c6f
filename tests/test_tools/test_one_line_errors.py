"""Errors a user can cause through the tools end in one line (issue 33, item 4).

A bad dataset, a checkpoint download without network, a bad config value and a missing
checkpoint: ``tools/train.py`` / ``tools/test.py`` print one line on stderr (no traceback), exit
status 1; ``--traceback`` gives the full traceback; mmdet's own ``tools/train.py`` (as shipped in
its wheel) ends its traceback with the same message. Files are named by their full paths.

The runs of the tools are forked from one interpreter (tests/forked_runs.py). No network is
simulated with an empty ``TORCH_HOME`` and a proxy on a closed local port (urllib's
``https_proxy``), so the download fails the same way with or without a network.
"""
import json
import os
import os.path as osp
import urllib.error

import pytest
import torch

from conftest import REPO_ROOT
from forked_runs import run_tools

from mmposenc.utils.errors import (CheckpointDownloadError, MMPosEncError, error_line,
                                   one_line, run_tool)

SMOKE = osp.join(REPO_ROOT, 'configs', 'smoke', 'detr_r18_1xb2-8it_coco128.py')
R50 = osp.join(REPO_ROOT, 'configs', 'peg_detr', 'detr-peg_r50_16xb2-50e_coco.py')
TRAIN = osp.join(REPO_ROOT, 'tools', 'train.py')
TEST = osp.join(REPO_ROOT, 'tools', 'test.py')
ANN = 'annotations/instances_train2017.json'
MISSING = 'train2017/000000000009.jpg'
HINT = '--traceback or MMPOSENC_TRACEBACK=1 shows the full traceback'
#: a proxy on a port nothing listens on: every download fails as offline
OFFLINE = {'https_proxy': 'http://127.0.0.1:9', 'HTTPS_PROXY': 'http://127.0.0.1:9',
           'http_proxy': 'http://127.0.0.1:9', 'HTTP_PROXY': 'http://127.0.0.1:9',
           'no_proxy': '', 'NO_PROXY': ''}
PRELOAD = ('torch', 'mmengine.config', 'mmengine.runner', 'mmdet.models', 'mmdet.datasets',
           'mmdet.evaluation', 'mmdet.engine', 'mmdet.visualization')


# ------------------------------------------------------------------------- unit level
def test_messages_are_one_line_and_chains_end_in_ours():
    assert one_line('a\n  b\n\nc ') == 'a b c'
    assert str(MMPosEncError('first\n  second')) == 'first second'
    try:
        try:
            raise CheckpointDownloadError('could not download x')
        except OSError as err:  # a host wrapping ours: the line is still ours
            raise RuntimeError('wrapped') from err
    except RuntimeError as err:
        assert error_line(err) == 'CheckpointDownloadError: could not download x'
    try:
        try:
            {}['k']
        except KeyError:
            raise ValueError('bad\nvalue')
    except ValueError as err:
        line = error_line(err)
    assert line.startswith("ValueError: bad value (caused by KeyError: k raised at "
                           'tests/test_tools/test_one_line_errors.py:')
    assert line.endswith(f'; {HINT})') and '\n' not in line


def test_run_tool_exits_with_the_line_or_reraises_with_the_flag(monkeypatch):
    def main(argv):
        raise KeyError('invalid depth 51 for resnet')
    with pytest.raises(SystemExit) as exit:
        run_tool(main, [])
    assert exit.value.code.startswith('KeyError: invalid depth 51 for resnet (raised at ')
    with pytest.raises(KeyError):
        run_tool(main, ['--traceback'])
    monkeypatch.setenv('MMPOSENC_TRACEBACK', '1')
    with pytest.raises(KeyError):
        run_tool(main, [])
    assert run_tool(lambda argv: 2, []) == 2


def test_failed_download_names_url_path_and_what_to_set(tmp_path, monkeypatch):
    """torchvision://resnet50 as an R50 backbone's init_cfg names it, without network: one
    line with the URL, the path the file is expected at and what to do offline."""
    from mmposenc.engine.checkpoint import load_model_zoo_checkpoint

    def offline(url, dst, *args, **kwargs):
        raise urllib.error.URLError(OSError(-2, 'Name or service not known'))
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    monkeypatch.setattr(torch.hub, '_hub_dir', None)
    monkeypatch.setattr(torch.hub, 'download_url_to_file', offline)
    with pytest.raises(CheckpointDownloadError) as err:
        load_model_zoo_checkpoint('torchvision://resnet50')
    cached = tmp_path / 'hub' / 'checkpoints' / 'resnet50-0676ba61.pth'
    assert str(err.value) == (
        'could not download torchvision://resnet50 (https://download.pytorch.org/models/'
        f'resnet50-0676ba61.pth) to {cached}: URLError: [Errno -2] Name or service not known. '
        f'Offline, put the file at {cached} (or set TORCH_HOME to a folder whose '
        'hub/checkpoints holds it), or do without these weights: set the init_cfg (or '
        'load_from) that names it to None (e.g. --cfg-options model.backbone.init_cfg=None)')
    assert isinstance(err.value, OSError)  # what mmengine's callers may catch


def test_unknown_model_zoo_name_and_missing_file_are_named():
    from mmposenc.engine.checkpoint import (CheckpointNotFoundError, check_checkpoint_file,
                                            load_model_zoo_checkpoint)
    with pytest.raises(CheckpointNotFoundError, match=r"^torchvision://resnet51: no such name "
                       r"in mmengine's model table of torchvision://; closest: "
                       r'torchvision://resnet50'):
        load_model_zoo_checkpoint('torchvision://resnet51')
    cwd = os.getcwd()
    with pytest.raises(FileNotFoundError, match=f'^{cwd}/nope/x.pth can not be found'):
        check_checkpoint_file('nope/x.pth')


# ------------------------------------------------------------------------- the tools
def _coco128_options(root, splits=('train', 'val', 'test')):
    """``--cfg-options`` putting the config's splits on COCO128 (COCO layout)."""
    opts = [f'data_root={root}/']
    for split in splits:
        opts += [f'{split}_dataloader.dataset.data_root={root}/',
                 f'{split}_dataloader.dataset.ann_file={ANN}',
                 f'{split}_dataloader.dataset.data_prefix.img=train2017/',
                 f'{split}_dataloader.num_workers=0',
                 f'{split}_dataloader.persistent_workers=False']
    return opts + [f'val_evaluator.ann_file={root}/{ANN}',
                   f'test_evaluator.ann_file={root}/{ANN}']


@pytest.fixture(scope='module')
def tool_runs(tmp_path_factory, coco128_root):
    import mmdet
    folder = tmp_path_factory.mktemp('one_line')
    root = coco128_root.rstrip('/')
    bad = folder / 'bad_coco'  # COCO128 with one image file missing
    (bad / 'train2017').mkdir(parents=True)
    for name in sorted(os.listdir(osp.join(root, 'train2017'))):
        if name != osp.basename(MISSING):
            (bad / 'train2017' / name).symlink_to(osp.join(root, 'train2017', name))
    (bad / 'annotations').mkdir()
    (bad / ANN).symlink_to(osp.join(root, ANN))
    mmdet_train = osp.join(osp.dirname(mmdet.__file__), '.mim', 'tools', 'train.py')
    offline = dict(OFFLINE, TORCH_HOME=str(folder / 'torch_home'))
    r50 = [R50, '--cfg-options'] + _coco128_options(root) + ['train_cfg.max_epochs=1']
    runs = dict(
        dataset=dict(argv=[TRAIN, SMOKE, '--work-dir', 'w1', '--cfg-options']
                     + _coco128_options(bad)),
        dataset_mmdet=dict(argv=[mmdet_train, SMOKE, '--work-dir', 'w2', '--cfg-options']
                           + _coco128_options(bad)),
        offline=dict(argv=[TRAIN] + r50[:1] + ['--work-dir', 'w3'] + r50[1:], env=offline),
        offline_mmdet=dict(argv=[mmdet_train] + r50[:1] + ['--work-dir', 'w4'] + r50[1:],
                           env=offline),
        offline_traceback=dict(argv=[TRAIN] + r50[:1] + ['--work-dir', 'w5', '--traceback']
                               + r50[1:], env=offline),
        depth=dict(argv=[TRAIN, R50, '--work-dir', 'w6', '--cfg-options',
                         'model.backbone.depth=51']),
        checkpoint=dict(argv=[TEST, SMOKE, 'missing.pth']),
    )
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    for run in runs.values():
        run['cwd'] = str(folder)
    done = run_tools(list(runs.values()), preload=PRELOAD, env=env)
    return dict(zip(runs, done), folder=folder, bad=bad)


def _one_line(res):
    """The tool's error line: the last of stderr, with no traceback before it (exit status 1;
    the stack's import-time warnings may come first)."""
    assert res.returncode == 1, res.stderr[-3000:]
    assert 'Traceback' not in res.stderr, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.strip().splitlines()
             if 'Warning: ' not in ln and not ln.startswith(' ')]
    assert len(lines) == 1, res.stderr[-3000:]
    return lines[0]


@pytest.mark.slow
def test_bad_dataset_is_one_line_naming_the_full_path(tool_runs):
    bad = tool_runs['bad']
    line = _one_line(tool_runs['dataset'])
    assert line == (f'DatasetCheckError: dataset check of CheckedCocoDataset ({bad}/{ANN}): '
                    f'1 problem(s): {bad}/{MISSING} (image 9): file not found (fix the data; '
                    'tools/misc/check_dataset.py CONFIG lists every problem, see its --help)')
    # mmdet's own train tool: a traceback whose last line is the same message
    out = tool_runs['dataset_mmdet'].stderr.strip().splitlines()
    assert out[-1] == 'mmposenc.datasets.dataset_check.' + line


@pytest.mark.slow
def test_offline_download_is_one_line_with_url_and_what_to_set(tool_runs):
    cached = tool_runs['folder'] / 'torch_home' / 'hub' / 'checkpoints' / \
        'resnet50-0676ba61.pth'
    line = _one_line(tool_runs['offline'])
    assert line.startswith('CheckpointDownloadError: could not download torchvision://resnet50 '
                           '(https://download.pytorch.org/models/resnet50-0676ba61.pth) to '
                           f'{cached}: URLError: '), line
    assert line.endswith(f'Offline, put the file at {cached} (or set TORCH_HOME to a folder '
                         'whose hub/checkpoints holds it), or do without these weights: set '
                         'the init_cfg (or load_from) that names it to None (e.g. '
                         '--cfg-options model.backbone.init_cfg=None)'), line
    assert not osp.exists(cached)
    for name in ('offline_mmdet', 'offline_traceback'):
        err = tool_runs[name].stderr
        assert tool_runs[name].returncode == 1 and 'Traceback (most recent call last)' in err
        assert err.strip().splitlines()[-1] == 'mmposenc.utils.errors.' + line, name


@pytest.mark.slow
def test_bad_config_value_and_missing_checkpoint_are_one_line(tool_runs):
    line = _one_line(tool_runs['depth'])
    assert line.startswith('KeyError: invalid depth 51 for resnet (raised at '
                           'mmdet/models/backbones/resnet.py:') and line.endswith(f'; {HINT})')
    line = _one_line(tool_runs['checkpoint'])
    assert line == (f'CheckpointNotFoundError: checkpoint {tool_runs["folder"]}/missing.pth '
                    'does not exist')
