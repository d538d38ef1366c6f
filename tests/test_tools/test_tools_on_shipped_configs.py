"""``tools/test.py --tta`` and ``tools/analysis/resolution_sweep.py`` on the shipped classifier
configs themselves (issue 19, item 4), by path and through a user config with an
``mmposenc::`` base, made small only by ``--cfg-options`` (ViT-B -> DeiT-Ti width).

mmpretrain's configs keep the data preprocessor (normalisation, BGR -> RGB, ``num_classes``)
at the top level, and mmengine's Runner gives it to the model it builds. ``--tta`` wraps the
model and the sweep built ``cfg.model`` alone: both ran the classifier on raw BGR pixels. The
references below are the classifier as the Runner builds it for a plain test.
"""
import argparse
import copy
import glob
import os.path as osp
import pickle

import pytest
import torch

from conftest import REPO_ROOT
from forked_runs import run_tools

pytest.importorskip('mmpretrain')

TOOLS = osp.join(REPO_ROOT, 'tools')
CAPE = 'cape/vit-base-p16_cape_16xb64_in1k.py'
UNIVIT = 'cape/vit-base-p16_cape-univit_16xb64_in1k.py'
CPVT_TI = 'cpvt/cpvt-tiny_4xb256_in1k.py'
#: --cfg-options that make a config small enough for the test (nothing else is changed)
TINY = {CAPE: ['model.backbone.arch=deit-tiny', 'model.head.in_channels=192'],
        UNIVIT: ['model.backbone.arch=deit-tiny', 'model.head.in_channels=192'],
        CPVT_TI: []}


def _config_file(name, how, folder):
    """The shipped config ``name`` by its path, or a user config in ``folder`` that inherits
    it as ``mmposenc::name`` and changes nothing."""
    if how == 'path':
        return osp.join(REPO_ROOT, 'configs', name)
    path = osp.join(str(folder), 'user_config.py')
    with open(path, 'w') as f:
        f.write(f"_base_ = 'mmposenc::{name}'\n")
    return path


def _load(path, options):
    from mmengine.config import Config, DictAction

    import mmposenc  # noqa: F401
    cfg = Config.fromfile(path)
    if options:  # as the tools' --cfg-options
        parsed = argparse.Namespace()
        DictAction(option_strings=[], dest='o')(None, parsed, options)
        cfg.merge_from_dict(parsed.o)
    return cfg


def _runner_classifier(cfg, seed=0):
    """The classifier of ``cfg`` as mmengine's Runner builds it for ``tools/test.py``
    without ``--tta`` (the top-level data_preprocessor set on the model)."""
    from mmengine.registry import DefaultScope

    import mmposenc.models  # noqa: F401
    from mmposenc.registry import MODELS
    model = copy.deepcopy(cfg.model)
    model.setdefault('data_preprocessor', copy.deepcopy(cfg.data_preprocessor))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(seed)
        return MODELS.build(model).eval()


def _imagenet_val(root, images, labels):
    """An ImageNet-layout val split (``val/`` and ``meta/val.txt``) of real images."""
    (root / 'val').mkdir(parents=True)
    (root / 'meta').mkdir()
    lines = []
    for img, label in zip(images, labels):
        (root / 'val' / osp.basename(img)).symlink_to(img)
        lines.append(f'{osp.basename(img)} {label}')
    (root / 'meta' / 'val.txt').write_text('\n'.join(lines) + '\n')
    return str(root)


def _coco_images(coco128_root, n):
    return sorted(glob.glob(osp.join(coco128_root, 'train2017', '*.jpg')))[:n]


def _compose(pipeline):
    from mmengine.dataset import Compose
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return Compose(copy.deepcopy(pipeline))


def _tool(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('name', [CAPE, UNIVIT])
def test_tta_gives_the_classifier_the_configs_data_preprocessor(name):
    """``apply_tta`` on the shipped TTA configs: the wrapped classifier gets the config's
    top-level data_preprocessor (mean, std, BGR -> RGB, num_classes)."""
    tool = _tool('mmposenc_test_tool', osp.join(TOOLS, 'test.py'))
    cfg = _load(osp.join(REPO_ROOT, 'configs', name), [])
    preprocessor = copy.deepcopy(cfg.data_preprocessor)
    assert preprocessor.mean and preprocessor.std and preprocessor.to_rgb
    tool.apply_tta(cfg, name)
    assert cfg.model.module.data_preprocessor == preprocessor


def test_sweep_builds_the_classifier_with_the_configs_data_preprocessor(tmp_path):
    """The sweep's model normalises and flips BGR -> RGB as the config says."""
    sweep = _tool('mmposenc_resolution_sweep', osp.join(TOOLS, 'analysis',
                                                         'resolution_sweep.py'))
    cfg = _load(osp.join(REPO_ROOT, 'configs', CPVT_TI), [])
    ckpt = str(tmp_path / 'clf.pth')
    torch.save({'state_dict': _runner_classifier(cfg).state_dict()}, ckpt)
    pre = sweep.build_model(cfg, ckpt).data_preprocessor
    assert pre.to_rgb is True
    torch.testing.assert_close(pre.mean.flatten(), torch.tensor(cfg.data_preprocessor.mean))
    torch.testing.assert_close(pre.std.flatten(), torch.tensor(cfg.data_preprocessor.std))


TTA_CASES = [(CAPE, 'path'), (UNIVIT, 'mmposenc::')]
SWEEP_CASES = [(CPVT_TI, 'path'), (CAPE, 'mmposenc::')]


@pytest.fixture(scope='module')
def tool_runs(coco128_root, tmp_path_factory):
    """The tools on the shipped configs, from the user's folders: ``tools/test.py --tta`` per
    TTA_CASES and ``resolution_sweep.py`` per SWEEP_CASES, each a fresh process forked from
    one interpreter that imported torch, mmengine and mmpretrain (tests/forked_runs.py).
    {('tta' | 'sweep', name, how): dict(res=, cfg=, clf=, images=, folder=)}."""
    cases, runs = {}, []
    for kind, name, how in [('tta', *c) for c in TTA_CASES] + [('sweep', *c) for c in
                                                                SWEEP_CASES]:
        folder = tmp_path_factory.mktemp(kind)
        config = _config_file(name, how, folder)
        options = TINY[name]
        cfg = _load(config, options)
        clf = _runner_classifier(cfg)
        ckpt = folder / 'clf.pth'
        if kind == 'tta':
            images = _coco_images(coco128_root, 4)
            data_root = _imagenet_val(folder / 'imagenet', images, [0, 1, 2, 3])
            torch.save({'state_dict': clf.state_dict(), 'meta': {}}, ckpt)
            argv = [osp.join(TOOLS, 'test.py'), config, str(ckpt), '--tta', '--out',
                    str(folder / 'preds.pkl'), '--work-dir', 'work', '--cfg-options', *options,
                    f'test_dataloader.dataset.data_root={data_root}',
                    'test_dataloader.batch_size=2', 'test_dataloader.num_workers=0',
                    'test_dataloader.persistent_workers=False']
        else:
            images = _coco_images(coco128_root, 6)
            test = _compose(cfg.test_dataloader.dataset.pipeline)
            with torch.no_grad():
                labels = [int(clf(clf.data_preprocessor(
                    dict(inputs=[test(dict(img_path=i))['inputs']]), False)['inputs'],
                    mode='tensor')[0].argmax()) for i in images]
            data_root = _imagenet_val(folder / 'imagenet', images, labels)
            torch.save({'state_dict': clf.state_dict()}, ckpt)
            argv = [osp.join(TOOLS, 'analysis', 'resolution_sweep.py'), config, str(ckpt),
                    '--resolutions', '224', '160', '--data-root', data_root, '--out',
                    'sweep/plot.png', '--batch-size', '3'] + (
                        ['--cfg-options', *options] if options else [])
        cases[(kind, name, how)] = dict(cfg=cfg, clf=clf, images=images, folder=folder)
        runs.append(dict(argv=argv, cwd=str(folder)))
    done = run_tools(runs, preload=('torch', 'mmengine.config', 'mmengine.runner',
                                    'mmpretrain.models', 'mmpretrain.datasets',
                                    'mmpretrain.evaluation'))
    for case, res in zip(cases.values(), done):
        case['res'] = res
    return cases


@pytest.mark.slow  # real images, the tool in a fresh process
@pytest.mark.parametrize('name,how', TTA_CASES)
def test_test_tool_tta_on_a_shipped_config(name, how, tool_runs):
    """``tools/test.py CONFIG CKPT --tta`` run from the user's folder: the dumped scores are
    the softmax of the mean logits, over the config's tta_pipeline views of each image, of
    the classifier as a plain test builds it (its data preprocessor on every view)."""
    case = tool_runs[('tta', name, how)]
    res, cfg, clf, images = case['res'], case['cfg'], case['clf'], case['images']
    assert res.returncode == 0, res.stderr[-4000:]
    dumped = pickle.load(open(case['folder'] / 'preds.pkl', 'rb'))
    assert len(dumped) == len(images)
    views = _compose(cfg.tta_pipeline)
    with torch.no_grad():
        for item, img in zip(dumped, images):
            inputs = views(dict(img_path=img))['inputs']
            assert len(inputs) == 3
            logits = sum(clf(clf.data_preprocessor(dict(inputs=[v]), False)['inputs'],
                             mode='tensor')[0] for v in inputs) / len(inputs)
            torch.testing.assert_close(item['pred_score'], logits.softmax(-1), atol=1e-5,
                                       rtol=1e-4)


@pytest.mark.slow  # real images, the tool in a fresh process
@pytest.mark.parametrize('name,how', SWEEP_CASES)
def test_resolution_sweep_on_a_shipped_config(name, how, tool_runs):
    """The sweep at the config's own test resolution (224) agrees with the classifier as a
    plain test builds it: the labels are that classifier's predictions on the config's test
    pipeline, so the sweep's top-1 at 224 is 100 %; outputs go to the user's --out."""
    case = tool_runs[('sweep', name, how)]
    res = case['res']
    assert res.returncode == 0, res.stderr[-4000:]
    assert '224: top-1 100.00 % on 6' in res.stdout, res.stdout[-2000:]
    assert (case['folder'] / 'sweep' / 'plot.png').is_file()
    assert (case['folder'] / 'sweep' / 'plot.json').is_file()
