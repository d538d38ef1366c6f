"""Official PerViT checkpoint -> mmposenc: every key mapped, strict loading, clear errors.

The official-layout state dict is built in-process (key names and shapes of the official
``VisionTransformer``, juhongm999/pervit ``model/pervit.py``) -- no download."""
import importlib.util
import os.path as osp
import sys

import pytest
import torch

from mmposenc.models.backbones import PerViT

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
TOOL = osp.join(ROOT, 'tools', 'model_converters', 'pervit_official_to_mmposenc.py')


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load('pervit_reference', osp.join(ROOT, 'tests', 'pervit_reference.py'))
conv = _load('pervit_converter', TOOL)


def test_tiny_layout_converts_and_loads_strictly():
    sd = ref.random_official_state_dict([128, 192, 224, 280], [3, 48, 64, 96, 128],
                                        num_heads=4, num_classes=1000, dtype=torch.float32)
    converted = conv.convert({'module.' + k: v for k, v in sd.items()})
    assert len(converted) == len(sd)
    assert converted['backbone.distance_embed.weight'].shape == (16, 1)
    assert 'backbone.blocks.1.shortcut.weight' in converted  # stage change 128 -> 192
    assert 'backbone.blocks.11.shortcut.weight' not in converted
    assert converted['head.fc.weight'].shape == (1000, 280)
    model = PerViT(arch='tiny', out_indices=3)
    conv.load_strict(model, converted)
    torch.testing.assert_close(model.blocks[4].attn.ppe.norm2.bias,
                               sd['blocks.4.attn.activation.gn2.bias'])
    backbone_only = conv.convert(sd, backbone_only=True)
    assert not any(k.startswith(('backbone.', 'head.')) for k in backbone_only)
    conv.load_strict(PerViT(arch='tiny', out_indices=3), backbone_only)


def test_unmapped_and_mismatched_keys_are_listed():
    sd = ref.random_official_state_dict([16, 24, 32, 40], [3, 8, 8, 12, 16], num_heads=2)
    with pytest.raises(KeyError, match=r"blocks\.0\.attn\.dots_sum"):
        conv.convert(dict(sd, **{'blocks.0.attn.dots_sum': torch.zeros(1)}))
    converted = conv.convert(sd)
    del converted['backbone.blocks.3.attn.ppe.proj2.weight']
    small = dict(embed_dims=[16, 24, 32, 40], depths=[2, 2, 6, 2], num_heads=2,
                 stem_channels=[8, 8, 12, 16])
    with pytest.raises(RuntimeError, match=r'missing keys \[.blocks\.3\.attn\.ppe\.proj2'):
        conv.load_strict(PerViT(arch=small, out_indices=3), converted)
    with pytest.raises(RuntimeError, match='unexpected keys'):
        conv.load_strict(PerViT(arch=small, out_indices=3),
                         dict(conv.convert(sd), **{'backbone.extra.weight': torch.zeros(1)}))


def test_cli_round_trip(tmp_path, monkeypatch, capsys):
    """``python tools/model_converters/pervit_official_to_mmposenc.py SRC DST`` on a
    checkpoint laid out as the official training saves it: the tool's ``__main__`` block run in
    this process (runpy, from a folder outside the repository), with no safe global of this
    process's letting the checkpoint's argparse arguments through (the tool allows them)."""
    import argparse
    import runpy
    sd = ref.random_official_state_dict([16, 24, 32, 40], [3, 8, 8, 12, 16], num_heads=2,
                                        dtype=torch.float32)
    src, dst = tmp_path / 'official.pth', tmp_path / 'converted.pth'
    # the official main.py saves its argparse arguments with the weights
    torch.save({'model': sd, 'epoch': 299, 'args': argparse.Namespace(model='pervit_tiny')},
               src)
    assert argparse.Namespace not in torch.serialization.get_safe_globals()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.setattr(sys, 'argv', [TOOL, str(src), str(dst)])
    runpy.run_path(TOOL, run_name='__main__')
    assert f'tensors written to {dst}' in capsys.readouterr().out
    from mmposenc.engine import load_local_checkpoint
    out = load_local_checkpoint(str(dst))['state_dict']  # weights_only=True
    assert set(out) == set(conv.convert(sd))
