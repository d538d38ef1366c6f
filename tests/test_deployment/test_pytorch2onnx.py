"""tools/deployment/pytorch2onnx.py: PEG-DETR, PEG-Deformable-DETR, DINO and CPVT exported with a
dynamic height and width run in onnxruntime like in PyTorch at several resolutions."""
import os.path as osp
import sys

import pytest
import torch

from conftest import REPO_ROOT

sys.path.insert(0, osp.join(REPO_ROOT, 'tools', 'deployment'))
sys.path.insert(0, osp.join(REPO_ROOT, 'tests', 'test_detectors'))
import pytorch2onnx as p2o  # noqa: E402
import tiny_detr_cfgs  # noqa: E402

pytest.importorskip('onnxruntime')
onnx = pytest.importorskip('onnx')

TINY_CPVT = dict(
    type='ImageClassifier',
    backbone=dict(type='mmposenc.CPVT', arch=dict(embed_dims=32, num_layers=2, num_heads=2,
                                                  feedforward_channels=64),
                  peg_positions=(0, 1)),
    neck=None,
    head=dict(type='LinearClsHead', num_classes=5, in_channels=32))


def _classifier(cfg):
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS
    from mmpretrain.utils import register_all_modules

    import mmposenc.models  # noqa: F401
    register_all_modules(init_default_scope=False)
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        torch.manual_seed(0)
        model = MODELS.build(cfg)
    model.init_weights()
    return model


def _input_dims(onnx_file):
    dims = onnx.load(onnx_file).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_param or d.dim_value for d in dims]


@pytest.mark.parametrize('name', ['peg_detr', 'peg_deformable_detr', 'cpvt'])
def test_onnxruntime_matches_torch_at_two_resolutions(name, tmp_path):
    torch.manual_seed(0)
    if name == 'peg_detr':
        model = tiny_detr_cfgs.build(tiny_detr_cfgs.detr_cfg(type='mmposenc.PEGDETR',
                                                             encoder_pos='peg'))
    elif name == 'peg_deformable_detr':
        model = tiny_detr_cfgs.build(tiny_detr_cfgs.deformable_detr_cfg(
            type='mmposenc.PEGDeformableDETR', encoder_pos='peg'))
    else:
        model = _classifier(TINY_CPVT)
    wrapper = p2o.wrap_model(model)
    assert not model.training
    out = str(tmp_path / f'{name}.onnx')
    p2o.export(wrapper, out, shape=(96, 128))
    # the image axes are symbolic in the file, not the traced 96 x 128
    assert _input_dims(out) == [1, 3, 'height', 'width']
    # two resolutions other than the traced one, plus the traced one
    # (70, 90): not a multiple of CPVT's patch size (16) nor of ResNet's stride
    rows = p2o.check(wrapper, out, [(128, 96), (64, 160), (70, 90), (96, 128)],
                     atol=p2o.DEFAULT_ATOL)
    for row in rows:
        assert row['ok'], row
        assert all(d <= 1e-4 for d in row['max_abs_diff'].values()), row
    if name == 'cpvt':
        assert rows[0]['outputs'] == {'logits': (1, 5)}
    else:
        queries = model.num_queries
        assert rows[0]['outputs']['bboxes'] == (1, queries, 4)
        assert rows[0]['outputs']['cls_scores'][:2] == (1, queries)
    # the check is not vacuous: another model's weights give different outputs
    with torch.no_grad():
        for p in wrapper.parameters():
            p.add_(0.05)
    assert not all(r['ok'] for r in p2o.check(wrapper, out, [(128, 96)]))


def test_errors(tmp_path):
    wrapper = p2o.wrap_model(_classifier(TINY_CPVT))
    with pytest.raises(ValueError, match='opset 13 < 16'):
        p2o.export(wrapper, str(tmp_path / 'x.onnx'), opset=13)
    with pytest.raises(TypeError, match='neither a DETR-style detector'):
        p2o.wrap_model(torch.nn.Linear(2, 2))
    det = p2o.wrap_model(tiny_detr_cfgs.build(tiny_detr_cfgs.detr_cfg(type='mmposenc.PEGDETR')))
    with pytest.raises(ValueError, match=r'one image \(1, 3, H, W\)'):
        det(torch.rand(2, 3, 32, 32))


@pytest.mark.parametrize('encoder_pos', ['cape', 'cape+peg'])
@pytest.mark.parametrize('cfg_fn', [tiny_detr_cfgs.detr_cfg, tiny_detr_cfgs.deformable_detr_cfg],
                         ids=['PEGDETR', 'PEGDeformableDETR'])
def test_cape_models_export_with_dynamic_height_and_width(cfg_fn, encoder_pos, tmp_path):
    """CAPE computes its positions from the traced feature-map shape: exported at 96 x 128,
    onnxruntime matches PyTorch at two sizes that are not multiples of the backbone's stride
    (until CAPE2d kept the traced sizes symbolic the graph ran only at the traced size, with
    a broadcast error in the encoder elsewhere, and the tool refused these models)."""
    name = 'mmposenc.PEGDETR' if cfg_fn is tiny_detr_cfgs.detr_cfg else \
        'mmposenc.PEGDeformableDETR'
    torch.manual_seed(0)
    model = tiny_detr_cfgs.build(cfg_fn(type=name, encoder_pos=encoder_pos))
    # mmcv initialises the deformable attention's sampling-offset and attention-weight
    # projections to zero weights: their output would not depend on the queries (nor on CAPE)
    with torch.no_grad():
        for mod_name, m in model.named_modules():
            if mod_name.endswith(('sampling_offsets', 'attention_weights')):
                m.weight.normal_(std=0.1)
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'cape.onnx'), shape=(96, 128))
    assert _input_dims(out) == [1, 3, 'height', 'width']
    # (70, 90) and (110, 75): neither a multiple of 32 (the tiny backbones' last stride)
    rows = p2o.check(wrapper, out, [(70, 90), (110, 75)], atol=p2o.DEFAULT_ATOL)
    for row in rows:
        assert row['ok'], row
        assert row['outputs']['bboxes'] == (1, model.num_queries, 4)
    # not vacuous: the encoder's positions are CAPE's, and CAPE depends on the grid (without
    # it, i.e. 'none' / 'peg' with the same weights, the outputs differ)
    assert model.cape is not None
    with torch.no_grad():
        ref = wrapper(torch.randn(1, 3, 70, 90, generator=torch.Generator().manual_seed(0)))
        model.cape.forward = lambda hw_shape, batch_size=None, padding_mask=None: \
            torch.zeros(batch_size, hw_shape[0] * hw_shape[1], model.cape.embed_dims)
        no_cape = wrapper(torch.randn(1, 3, 70, 90, generator=torch.Generator().manual_seed(0)))
    assert max((r - n).abs().max() for r, n in zip(ref, no_cape)) > 1e-3


def test_cape_classifier_exports_with_dynamic_height_and_width(tmp_path):
    """A PEViT with a CAPE2d pos_encoding (here with CAPE Table 6's sqrt range, which scales
    the positions by the grid size) exported at 32 x 32 runs at other patch grids. (Sizes
    that are multiples of the patch size: PEViT's patch embedding pads a partial patch by an
    amount traced as a constant, whatever the position encoding.)"""
    cfg = dict(type='ImageClassifier',
               backbone=dict(type='mmposenc.PEViT', arch=TINY_CPVT['backbone']['arch'],
                             img_size=32, patch_size=8,
                             pos_encoding=dict(type='mmposenc.CAPE2d', eval_pos_range='sqrt')),
               neck=None, head=dict(type='VisionTransformerClsHead', num_classes=5,
                                    in_channels=32))
    model = _classifier(cfg)
    torch.nn.init.normal_(model.head.layers.head.weight)  # zero-initialised: all logits 0
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'vit.onnx'), shape=(32, 32))
    rows = p2o.check(wrapper, out, [(48, 40), (40, 64)], atol=p2o.DEFAULT_ATOL)
    assert all(r['ok'] and r['outputs'] == {'logits': (1, 5)} for r in rows), rows
    with torch.no_grad():
        assert wrapper(torch.ones(1, 3, 48, 40)).abs().max() > 1e-3


@pytest.mark.parametrize('cfg_fn', [tiny_detr_cfgs.detr_cfg, tiny_detr_cfgs.deformable_detr_cfg],
                         ids=['PEGDETR', 'PEGDeformableDETR'])
def test_a_model_in_training_mode_is_refused_before_tracing(cfg_fn, tmp_path):
    """Training mode would trace one draw of CAPE's augmentation into the graph: refused up
    front (nothing written), naming the module; wrap_model's eval mode is accepted."""
    name = 'mmposenc.PEGDETR' if cfg_fn is tiny_detr_cfgs.detr_cfg else \
        'mmposenc.PEGDeformableDETR'
    wrapper = p2o.wrap_model(tiny_detr_cfgs.build(cfg_fn(type=name, encoder_pos='cape')))
    p2o.check_exportable(wrapper)
    wrapper.detector.cape.train()
    out = tmp_path / 'cape.onnx'
    with pytest.raises(p2o.ExportNotSupportedError, match=r'detector\.cape is in training'):
        p2o.export(wrapper, str(out), shape=(96, 128))
    assert not out.exists()


def test_shipped_r50_config_without_checkpoint_builds_offline(monkeypatch, capfd):
    """No --checkpoint: random weights as the help says, nothing downloaded (the R50 configs'
    backbone init_cfg points at torchvision's ResNet-50), no per-parameter init INFO."""
    from mmengine.runner.checkpoint import CheckpointLoader

    def no_loading(filename, *args, **kwargs):
        raise AssertionError(f'pytorch2onnx tried to load {filename}')

    monkeypatch.setattr(CheckpointLoader, 'load_checkpoint', no_loading)
    from mmengine.config import Config
    path = osp.join(REPO_ROOT, 'configs', 'peg_detr', 'detr-peg_r50_16xb2-50e_coco.py')
    assert Config.fromfile(path).model.backbone.init_cfg.type == 'Pretrained'
    capfd.readouterr()
    model = p2o.build_model(path)
    out, err = capfd.readouterr()
    assert 'init_weights' not in out + err, out[:2000]
    assert type(model).__name__ == 'PEGDETR' and not model.training
    # the backbone is randomly initialised, from seed 0: the same weights in every run,
    # whatever the global generator's state (the guide's measured table is reproducible)
    w = model.backbone.conv1.weight
    torch.manual_seed(123)
    assert w.std() > 0 and torch.equal(w, p2o.build_model(path).backbone.conv1.weight)


def test_drop_pretrained_finds_nested_and_listed_init_cfgs():
    cfg = dict(backbone=dict(init_cfg=[dict(type='Pretrained', checkpoint='a.pth'),
                                       dict(type='Constant', val=0)]),
               neck=[dict(init_cfg=dict(type='Pretrained', checkpoint='b.pth'))],
               head=dict(init_cfg=dict(type='Normal')))
    assert sorted(p2o.drop_pretrained(cfg)) == ['a.pth', 'b.pth']
    assert cfg['backbone']['init_cfg'] == [dict(type='Constant', val=0)]
    assert cfg['neck'][0]['init_cfg'] is None and cfg['head']['init_cfg'] == dict(type='Normal')


def test_cli_config_and_checkpoint(tmp_path, monkeypatch, capsys):
    """``python tools/deployment/pytorch2onnx.py CONFIG --checkpoint ... --check-shape ...``:
    the tool's ``__main__`` block run in this process (its argument parsing, the export and
    the table it prints), from a folder outside the repository. (The tool run as ``python
    <tool>`` in a fresh process, up to its config parsing:
    tests/test_tools/test_tools_as_users_run_them.py's config tools.)"""
    import runpy
    model = _classifier(TINY_CPVT)
    ckpt = tmp_path / 'tiny.pth'
    torch.save({'state_dict': model.state_dict()}, ckpt)
    cfg = tmp_path / 'tiny_cpvt.py'
    cfg.write_text(f"default_scope = 'mmpretrain'\nmodel = {TINY_CPVT!r}\n")
    out = tmp_path / 'tiny.onnx'
    tool = osp.join(REPO_ROOT, 'tools', 'deployment', 'pytorch2onnx.py')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'path', list(sys.path))
    monkeypatch.setattr(sys, 'argv', [
        tool, str(cfg), '--checkpoint', str(ckpt), '--out', str(out), '--shape', '64', '96',
        '--check-shape', '96', '64', '--check-shape', '128', '128'])
    capsys.readouterr()
    runpy.run_path(tool, run_name='__main__')  # a failed check ends in SystemExit
    stdout = capsys.readouterr().out
    assert out.exists()
    table = [line for line in stdout.splitlines() if line.startswith('| ')]
    assert len(table) == 3 and table[1].startswith('| 96 x 64 ') and table[2].endswith('yes |')


def test_padding_exact_shipped_config_exports_with_dynamic_sizes(tmp_path):
    """The shipped demo Deformable-DETR with the padding-exact mode on (issue 20, item 3: the
    model's switch ``padding_exact=True``: ``mmposenc.PaddingExactResNet`` with its masking
    hooks, ``MaskedChannelMapper``), exported
    by the tool at 96 x 128, runs in onnxruntime like PyTorch at sizes that are not multiples
    of the stride; an export binds no image sizes (one unpadded image: the stock path)."""
    path = osp.join(REPO_ROOT, 'configs', 'peg_deformable_detr',
                    'deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py')
    torch.manual_seed(0)
    model = p2o.build_model(path, cfg_options={'model.padding_exact': True})
    assert type(model.backbone).__name__ == 'PaddingExactResNet' and model.backbone.padding_exact
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained-like norms; non-zero sampling offsets (mmcv inits zeros)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.5, generator=gen)
                m.bias.normal_(0, 0.5, generator=gen)
            elif name.endswith(('sampling_offsets', 'attention_weights')):
                m.weight.normal_(std=0.1, generator=gen)
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'exact.onnx'), shape=(96, 128))
    assert _input_dims(out) == [1, 3, 'height', 'width']
    rows = p2o.check(wrapper, out, [(70, 90), (110, 75), (96, 128)], atol=p2o.DEFAULT_ATOL)
    assert all(r['ok'] and r['outputs']['bboxes'] == (1, model.num_queries, 4)
               for r in rows), rows


def _tied_encoder_scores(branch, args, scores):
    """Forward hook of a two-stage detector's encoder class branch: the scores rounded to
    steps of 0.5, so that many tokens have bit-equal scores (traced into the export too)."""
    return torch.round(scores * 2) / 2


@pytest.mark.parametrize('host', ['mmposenc.PEGDINO', 'DINO'])
@pytest.mark.parametrize('tie', ['all', 'rounded', 'none'])
def test_dino_export_selects_the_queries_pytorch_selects_ties_included(host, tie, tmp_path):
    """DINO's query selection (a top-k over the encoder tokens, the i-th selected token paired
    with the i-th content query) in onnxruntime and in PyTorch: the same queries at several
    sizes and seeds, with every token tied, many tied, or as the weights give (issue 33,
    item 2). ``torch.topk`` orders the ties otherwise (measured: 6 of 60 zeros give
    [41, 38, 39, 40, 43, 44]), which changes every output row."""
    from mmposenc.models.utils.stable_sort import StableTopk
    torch.manual_seed(0)
    model = tiny_detr_cfgs.build(tiny_detr_cfgs.dino_cfg(type=host))
    branch = model.bbox_head.cls_branches[model.decoder.num_layers]
    if tie == 'all':
        branch.register_forward_hook(lambda m, a, s: s * 0)
    elif tie == 'rounded':
        branch.register_forward_hook(_tied_encoder_scores)
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'dino.onnx'), shape=(96, 128))
    shapes = [(96, 128), (128, 96), (70, 90), (160, 200)]
    for seed in (0, 1, 2):
        rows = p2o.check(wrapper, out, shapes, atol=p2o.DEFAULT_ATOL, seed=seed)
        for row in rows:
            assert row['ok'] and row['outputs']['bboxes'] == (1, model.num_queries, 4), row
            assert all(d <= 1e-5 for d in row['max_abs_diff'].values()), row
    img = torch.randn(1, 3, 96, 128, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with StableTopk():
            stable = wrapper(img)
        own = wrapper(img)  # mmposenc's DINO applies the rule itself, mmdet's does not
    if host == 'mmposenc.PEGDINO':
        assert all(torch.equal(a, b) for a, b in zip(stable, own))
    elif tie == 'all':  # the check can fail: torch.topk's own order of the ties
        assert not torch.equal(stable[1], own[1])


def test_dino_with_fewer_tokens_than_queries_is_refused_before_export(tmp_path):
    """A size with fewer encoder tokens than queries is refused with one line naming a size
    that has enough (in PyTorch the model itself refuses it in one line)."""
    from mmposenc.models.detectors.stable_selection import FewTokensError
    torch.manual_seed(0)
    model = tiny_detr_cfgs.build(tiny_detr_cfgs.dino_cfg(type='mmposenc.PEGDINO'))
    wrapper = p2o.wrap_model(model)
    # strides 16 and 32: 32 x 32 gives 2 x 2 + 1 x 1 = 5 tokens < 6 queries; 33 x 33 gives
    # 3 x 3 + 2 x 2 = 13
    assert p2o.count_tokens(wrapper, (32, 32)) == 5
    with pytest.raises(p2o.ExportNotSupportedError,
                       match=r'^32 x 32 gives PEGDINO 5 encoder tokens, fewer than its 6 '
                       r'queries: .* \(e\.g\. 33 x 33 or larger\)$'):
        p2o.export(wrapper, str(tmp_path / 'dino.onnx'), shape=(32, 32))
    assert not (tmp_path / 'dino.onnx').exists()
    p2o.check_sizes(wrapper, [(33, 33), (96, 128)])  # enough tokens: no error
    with pytest.raises(FewTokensError, match=r'^PEGDINO selects 6 queries from the encoder '
                       r'tokens but the input gives 5 = 2 x 2 \+ 1 x 1: use a larger image$'):
        with torch.no_grad():
            wrapper(torch.randn(1, 3, 32, 32))
    assert p2o.count_tokens(p2o.wrap_model(tiny_detr_cfgs.build(
        tiny_detr_cfgs.detr_cfg(type='mmposenc.PEGDETR'))), (32, 32)) is None


@pytest.mark.parametrize('eps, near', [(1e-6, True), (1e-2, False)])
def test_dino_check_accepts_other_orders_of_near_ties_only(eps, near, tmp_path):
    """Scores closer than the backends' rounding come out in either order (an R50 DINO's
    encoder scores are ~2e-6 apart between onnxruntime and PyTorch, its neighbours in the top
    900 2.4e-7 apart). Simulated here: the exported graph ties many tokens (scores in steps of
    0.5, ties by lower index), PyTorch alone then adds ``eps`` * (token index / tokens), which
    orders them by higher index. Within ``atol`` the check accepts the other order and compares
    the outputs of PyTorch run with onnxruntime's selection (they agree to rounding); beyond it
    the check fails (issue 33, item 2)."""
    torch.manual_seed(0)
    model = tiny_detr_cfgs.build(tiny_detr_cfgs.dino_cfg())
    branch = model.bbox_head.cls_branches[model.decoder.num_layers]
    branch.register_forward_hook(_tied_encoder_scores)
    wrapper = p2o.wrap_model(model)
    out = p2o.export(wrapper, str(tmp_path / 'dino.onnx'), shape=(96, 128))
    branch.register_forward_hook(  # PyTorch only: after the export
        lambda m, a, s: s + eps * torch.arange(s.shape[1])[None, :, None] / s.shape[1])
    rows = p2o.check(wrapper, out, [(96, 128), (70, 90)], atol=p2o.DEFAULT_ATOL)
    for row in rows:
        (sel, ) = row['selections']
        assert sel['reordered'] > 0 and sel['near_tie'] is near, row
        assert 0 < sel['max_gap'] <= eps
        assert row['ok'] is near
        # unforced, every row moves; on onnxruntime's selection they agree to rounding
        assert row['unforced_max_abs_diff']['cls_scores'] > 1e-2
        assert max(row['max_abs_diff'].values()) <= 1e-5


def test_compare_selection():
    scores = torch.tensor([[3., 2., 2. + 1e-6, 1., 0.]])
    ours = torch.tensor([[0, 2, 1]])
    same = p2o.compare_selection(scores, 1, ours, ours.clone(), 1e-4)
    assert same == dict(reordered=0, max_gap=0., near_tie=True)
    swapped = p2o.compare_selection(scores, 1, ours, torch.tensor([[0, 1, 2]]), 1e-4)
    assert swapped['reordered'] == 2 and swapped['near_tie']
    assert swapped['max_gap'] == pytest.approx(1e-6, abs=1e-7)
    assert not p2o.compare_selection(scores, 1, ours, torch.tensor([[0, 1, 2]]), 1e-7)[
        'near_tie']
    # another set: a token left out scores above one kept
    other = p2o.compare_selection(scores, 1, ours, torch.tensor([[0, 2, 3]]), 1e-4)
    assert other['reordered'] == 1 and not other['near_tie']
    # a rise: the same set in a wrong order
    rise = p2o.compare_selection(scores, 1, ours, torch.tensor([[2, 0, 1]]), 1e-4)
    assert not rise['near_tie']
    # another number of tokens (a graph whose k is not PyTorch's): refused, nothing forced
    fewer = p2o.compare_selection(scores, 1, ours, torch.tensor([[0, 2]]), 1e-4)
    assert fewer == dict(reordered=-1, max_gap=float('inf'), near_tie=False)
