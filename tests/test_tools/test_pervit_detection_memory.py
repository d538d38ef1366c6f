"""tools/analysis/pervit_detection_memory.py: the count of what the official Phi_p keeps for
backward equals the bytes autograd really saves when the transcribed official code runs, and
the script trains the shipped RetinaNet PerViT-T config (tiny scale here)."""
import importlib.util
import json
import math
import os.path as osp

import pytest
import torch

from conftest import REPO_ROOT


def _load(name, *parts):
    spec = importlib.util.spec_from_file_location(name, osp.join(REPO_ROOT, *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


script = _load('pervit_detection_memory', 'tools', 'analysis', 'pervit_detection_memory.py')
ref = _load('pervit_reference_for_memory', 'tests', 'pervit_reference.py')


def _saved_bytes(fn, exclude):
    """Run ``fn`` and return (its output, bytes of the distinct storages autograd saved for
    backward, leaving out the storages in ``exclude``, i.e. the weights)."""
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(storages.values())


@pytest.mark.parametrize('hw', [(5, 7), (6, 6), (3, 11)])
def test_official_count_equals_autograd_saved_bytes(hw):
    heads = 4
    sd = ref.random_official_state_dict([16, 24, 32, 40], [3, 8, 16], num_heads=heads,
                                        dtype=torch.float32)
    for t in sd.values():
        if t.is_floating_point():
            t.requires_grad_()
    weights = {t.untyped_storage().data_ptr() for t in sd.values()}
    rpe, shared = _saved_bytes(lambda: ref.official_rpe_proj(sd, hw), weights)
    phi, per_block = _saved_bytes(
        lambda: ref.official_phi_p(sd, 'blocks.0.attn.activation.', rpe, hw), weights)
    assert phi.shape == (1, heads, hw[0] * hw[1], hw[0] * hw[1])

    count = script.official_phi_p_training_bytes(hw, num_heads=heads, num_blocks=3)
    assert count['per_block'] == per_block
    assert count['shared'] == shared
    assert count['rpe_proj'] == rpe.numel() * rpe.element_size()
    assert count['total'] == 3 * per_block + shared + count['rpe_proj']


def test_official_count_at_detection_scale_matches_the_issue():
    """1333 x 800 (padded to 1344 x 800): 50 x 84 tokens; the issue quotes ~54 GB."""
    assert script.token_grid((800, 1344)) == (50, 84)
    total = script.official_phi_p_training_bytes((50, 84))['total']
    assert 50e9 < total < 56e9


def test_script_trains_the_shipped_config_on_random_images(tmp_path):
    out = tmp_path / 'result.json'
    result = script.main(['--iters', '1', '--batch-size', '2', '--scale', '100', '64',
                          '--threads', '1', '--json', str(out)])
    ours = result['ours']
    assert ours['config'] == osp.join('configs', 'pervit', 'retinanet_pervit-t_fpn_1x_coco.py')
    row, = ours['iters']
    assert row['batch_shape'] == (2, 3, 64, 128)  # padded to 32
    assert row['tokens'] == (4, 8)
    assert ours['with_cp'] is False
    assert ours['finite_losses'] and all(math.isfinite(v) for v in row['losses'].values())
    assert row['losses']['loss'] > 0
    assert ours['peak_rss'] >= ours['rss_after_build'] > 0
    assert result['official_estimate']['tokens'] == [4, 8]
    assert json.loads(out.read_text())['ours']['iters'][0]['tokens'] == [4, 8]
