"""tools/analysis/resolution_sweep.py: a tiny CPVT trained on COCO128 object crops, evaluated
at several resolutions without fine-tuning."""
import json
import os.path as osp

import pytest
import torch

from tool_files import load_tool

sweep = load_tool('analysis/resolution_sweep.py')

DEIT_TEST = [dict(type='LoadImageFromFile'),
             dict(type='ResizeEdge', scale=256, edge='short', backend='pillow'),
             dict(type='CenterCrop', crop_size=224), dict(type='PackInputs')]


def test_set_resolution_rewrites_the_test_pipeline():
    out = sweep.set_resolution(DEIT_TEST, 384)
    assert out[1]['scale'] == round(256 * 384 / 224) and out[2]['crop_size'] == 384
    assert DEIT_TEST[2]['crop_size'] == 224  # the config's pipeline is not modified
    resize = [dict(type='LoadImageFromFile'), dict(type='mmpretrain.Resize', scale=(64, 64)),
              dict(type='PackInputs')]
    assert sweep.set_resolution(resize, 48)[1]['scale'] == (48, 48)
    with pytest.raises(ValueError, match='positive integers'):
        sweep.set_resolution(resize, 0)
    with pytest.raises(ValueError, match='has no Resize/ResizeEdge/CenterCrop'):
        sweep.set_resolution([dict(type='LoadImageFromFile'), dict(type='PackInputs')], 64)


CONFIG = """
default_scope = 'mmpretrain'
custom_imports = dict(imports=['mmposenc.models'], allow_failed_imports=False)
model = dict(
    type='ImageClassifier',
    data_preprocessor=dict(num_classes={num_classes}, mean=[123.675, 116.28, 103.53],
                           std=[58.395, 57.12, 57.375], to_rgb=True),
    backbone=dict(type='mmposenc.CPVT', patch_size=8, peg_positions=(0, ),
                  arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                            feedforward_channels=64)),
    neck=None,
    head=dict(type='LinearClsHead', num_classes={num_classes}, in_channels=32,
              loss=dict(type='CrossEntropyLoss')))
test_dataloader = dict(
    batch_size=8, num_workers=0,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(type='CustomDataset', data_root='{root}',
                 pipeline=[dict(type='LoadImageFromFile'), dict(type='Resize', scale=(48, 48)),
                           dict(type='PackInputs')]))
"""


@pytest.mark.slow  # real COCO128 crops, 20 training steps, 3 resolutions (~10 s)
def test_sweep_on_a_trained_tiny_cpvt(coco128_root, tmp_path):
    coco_crops_cls = load_tool('dataset_converters/coco_crops_cls.py')
    from mmengine.config import Config
    crops = str(tmp_path / 'crops')
    stats = coco_crops_cls.convert(coco128_root, crops, num_classes=3, min_size=24,
                                   max_size=64, max_per_class=12)
    cfg_file = tmp_path / 'tiny_cpvt.py'
    cfg_file.write_text(CONFIG.format(num_classes=3, root=f'{crops}/val'))

    # train briefly on the training crops at 48 px, save a checkpoint
    cfg = Config.fromfile(str(cfg_file))
    cfg.test_dataloader.dataset.data_root = f'{crops}/train'
    from mmengine.registry import DefaultScope
    from mmengine.runner import Runner
    from mmpretrain.utils import register_all_modules

    import mmposenc.models  # noqa: F401
    from mmposenc.registry import MODELS
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(0)
        model = MODELS.build(cfg.model)
        loader = Runner.build_dataloader(cfg.test_dataloader, seed=0)
    model.init_weights()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for _, batch in zip(range(20), (b for _ in range(10) for b in loader)):
        data = model.data_preprocessor(batch, True)
        loss = model(**data, mode='loss')['loss']
        opt.zero_grad()
        loss.backward()
        opt.step()
    ckpt = str(tmp_path / 'tiny_cpvt.pth')
    torch.save({'state_dict': model.state_dict()}, ckpt)

    png = str(tmp_path / 'out' / 'sweep.png')
    rows = sweep.main([str(cfg_file), ckpt, '--resolutions', '32', '48', '80', '--out', png,
                       '--max-samples', '10', '--train-resolution', '48'])
    assert [r['resolution'] for r in rows] == [32, 48, 80]
    assert [r['input_shape'] for r in rows] == [(32, 32), (48, 48), (80, 80)]
    n_val = min(10, stats['val'])
    assert all(r['samples'] == n_val for r in rows)
    assert all(0.0 <= r['accuracy'] <= 1.0 for r in rows)
    # the accuracy at 48 px is the one of the trained weights: recompute it by hand
    model.eval()
    with torch.no_grad():
        row48 = sweep.evaluate(model, Config.fromfile(str(cfg_file)), 48, max_samples=10)
    assert row48['accuracy'] == rows[1]['accuracy']
    assert osp.getsize(png) > 1000
    with open(osp.splitext(png)[0] + '.json') as f:
        assert len(json.load(f)['rows']) == 3
    table = sweep.to_markdown(rows).splitlines()
    assert len(table) == 2 + 3 and table[3].startswith('| 48 | 48 x 48 |')

    with pytest.raises(SystemExit, match='--resolutions must be positive'):
        sweep.main([str(cfg_file), ckpt, '--resolutions', '64', '-32', '--out', png])
