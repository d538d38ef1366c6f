"""Every model with the encoder position switch, one suite parametrised over the registry.

The PEG-capable models are the registered subclasses of
:class:`~mmposenc.models.detectors.encoder_pos.EncoderPosMixin`; :data:`SPECS` says how to build
each next to its stock mmdet / mmseg model (the pixel decoder in both of its hosts: mmdet's
Mask2Former and mmseg's EncoderDecoder). For each:

- ``'sine'`` is the stock model bit for bit with the same weights (same state-dict keys), on a
  padded batch where mmdet's masks are exact and on the no-mask path;
- the encoder memory on an image's valid tokens is the same alone and in a padded batch with
  larger images (<= 1e-5), for real COCO128 images through the host's own pipeline and data
  preprocessor at sizes that are not multiples of any stride (backbone features made
  batch-independent, as in test_padding_exact_detectors.py), in every encoder_pos mode; the
  stock model fails the same comparison;
- the no-mask path: same-size images give the PEGs no mask, padded ones a mask;
- every PEG parameter gets a gradient from the host's loss; every other parameter too, except
  those documented as unused in that mode;
- ONNX export (dynamic height and width) runs in onnxruntime as in PyTorch, for the stock model
  and ours.
(bf16 autocast: tests/test_reliability/test_bf16_autocast.py, over the whole registry.)
"""
import copy
import os.path as osp
import sys

import pytest
import torch
from tiny_detr_cfgs import (build, build_seg, conditional_detr_cfg, dab_detr_cfg,
                            deformable_detr_cfg, detr_cfg, dino_cfg, mask2former_cfg,
                            packed_inputs, seg_inputs, seg_mask2former_cfg)
from torch import nn

pytest.importorskip('mmdet')
pytest.importorskip('mmseg')

from test_padding_exact_detectors import IMAGES, SubsampleBackbone  # noqa: E402

ENCODER_POS = ('sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none')
PIXEL_DECODER = 'mmposenc.PEGMSDeformAttnPixelDecoder'
SEG_HEAD = 'mmposenc.PaddingExactSegMask2FormerHead'
DET_HEAD = 'mmposenc.PaddingExactMask2FormerHead'


def _det(cfg_fn, stock, ours, kind, **extra):
    return dict(cfg=cfg_fn, stock=stock, ours=ours, kind=kind, **extra)


#: test id -> how to build the stock model and ours, and what kind of host it is
SPECS = {
    'PEGDETR': _det(detr_cfg, 'DETR', 'mmposenc.PEGDETR', 'detr'),
    'PEGConditionalDETR': _det(conditional_detr_cfg, 'ConditionalDETR',
                               'mmposenc.PEGConditionalDETR', 'detr'),
    # DAB-DETR's position-scaling MLP has nothing to scale without encoder positions
    'PEGDABDETR': _det(dab_detr_cfg, 'DABDETR', 'mmposenc.PEGDABDETR', 'detr',
                       unused={'peg': ('encoder.query_scale', ),
                               'none': ('encoder.query_scale', ),
                               'cape+peg': ()}),
    'PEGDeformableDETR': _det(deformable_detr_cfg, 'DeformableDETR',
                              'mmposenc.PEGDeformableDETR', 'deformable'),
    # DINO's decoder encodes its query positions from the reference boxes scaled to the
    # padded batch (mmdet and the official code): its predictions depend on the padding even
    # where its encoder memory does not
    # exact_queries=False: mmdet's query selection and positions (computed over / scaled to
    # the padded batch), the stock model to compare 'sine' with on a padded batch
    'PEGDINO': _det(dino_cfg, 'DINO', 'mmposenc.PEGDINO', 'deformable',
                    as_stock=dict(exact_queries=False), box_tol=1e-3),
    'PEGMSDeformAttnPixelDecoder@mmdet': dict(kind='mask2former'),
    'PEGMSDeformAttnPixelDecoder@mmseg': dict(kind='seg'),
}
NAMES = sorted(SPECS)
#: shapes of a padded batch whose size (96 x 128) is a multiple of every stride (16, 32): mmdet's
#: nearest-interpolated masks are exact there; and of a batch with nothing padded
MULTIPLES = [(3, 96, 64), (3, 64, 128)]
SAME = [(3, 72, 72), (3, 72, 72)]
PADDED = [(3, 96, 80), (3, 64, 112)]


def build_model(name, encoder_pos=None, **kwargs):
    """The stock model (``encoder_pos=None``) or ours in ``encoder_pos``."""
    spec = SPECS[name]
    torch.manual_seed(0)
    if spec['kind'] in ('detr', 'deformable'):
        if encoder_pos is None:
            return build(spec['cfg'](type=spec['stock']))
        return build(spec['cfg'](type=spec['ours'], encoder_pos=encoder_pos, **kwargs))
    ours = {} if encoder_pos is None else dict(encoder_pos=encoder_pos, **kwargs)
    if spec['kind'] == 'mask2former':
        if encoder_pos is None:
            return build(mask2former_cfg())
        return build(mask2former_cfg(DET_HEAD, PIXEL_DECODER, **ours))
    if encoder_pos is None:
        return build_seg(seg_mask2former_cfg())
    return build_seg(seg_mask2former_cfg(SEG_HEAD, PIXEL_DECODER, **ours))


def encoder_of(model):
    """The (PEG) encoder of a detector or of a Mask2Former's pixel decoder."""
    return pixel_decoder_of(model).encoder if is_mask2former(model) else model.encoder


def is_mask2former(model):
    return hasattr(model, 'panoptic_head') or hasattr(model, 'decode_head')


def pixel_decoder_of(model):
    head = model.panoptic_head if hasattr(model, 'panoptic_head') else model.decode_head
    return head.pixel_decoder


def packed_batch(name, shapes, seed=0):
    """Host-format inputs of images of ``shapes`` with random annotations."""
    kind = SPECS[name]['kind']
    if kind == 'seg':
        return seg_inputs(shapes, seed=seed)
    if kind == 'mask2former':
        import numpy as np
        from mmdet.testing import demo_mm_inputs
        torch.manual_seed(seed)
        np.random.seed(seed)  # demo_mm_inputs draws the semantic maps from numpy's global RNG
        return demo_mm_inputs(len(shapes), image_shapes=shapes, num_items=[1, 2][:len(shapes)],
                              num_classes=4, with_mask=True, with_semantic=True)
    return packed_inputs(shapes, num_items=[1, 2][:len(shapes)], seed=seed)


def run_modes(name, model, shapes, seed=0):
    """(tensor outputs, losses, predictions) on one batch. mmseg tests one image size per
    batch: its predict mode gets the first image repeated; and its Mask2Former has no tensor
    mode (EncoderDecoder calls the head without the data samples the head needs)."""
    packed = packed_batch(name, shapes, seed)
    eval_packed = packed
    seg = SPECS[name]['kind'] == 'seg'
    if seg:
        eval_packed = packed_batch(name, [shapes[0]] * len(shapes), seed)
    model.eval()
    data = model.data_preprocessor(copy.deepcopy(eval_packed), False)
    with torch.no_grad():
        tensors = None if seg else model(**data, mode='tensor')
        preds = model(**data, mode='predict')
    model.train()
    data = model.data_preprocessor(copy.deepcopy(packed), True)
    torch.manual_seed(seed)  # Mask2Former samples mask points at random, DINO noises boxes
    losses = model(**data, mode='loss')
    return tensors, losses, preds


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _flat(item)]
    if hasattr(x, 'to_dict'):  # data samples: their tensors
        return [t for _, t in sorted(x.to_dict().items()) for t in _flat(t)]
    if hasattr(x, 'all_items'):
        return [t for _, t in sorted(x.all_items()) for t in _flat(t)]
    return []


def test_specs_cover_every_peg_capable_model():
    from mmposenc.models.detectors import EncoderPosMixin
    from mmposenc.registry import MODELS
    registered = {n for n, cls in MODELS.module_dict.items() if issubclass(cls, EncoderPosMixin)}
    assert registered == {n.split('@')[0] for n in SPECS}, registered


def test_maskformer_pixel_decoder_is_not_covered_as_the_readme_says():
    """configs/peg_mask2former/README.md states that MaskFormer's pixel decoder has no version
    with the switch; a registered one must come with a README update (and a SPECS entry)."""
    from mmdet.models.layers import TransformerEncoderPixelDecoder

    from conftest import REPO_ROOT
    from mmposenc.registry import MODELS
    covered = [n for n, cls in MODELS.module_dict.items()
               if issubclass(cls, TransformerEncoderPixelDecoder)]
    readme = open(osp.join(REPO_ROOT, 'configs', 'peg_mask2former', 'README.md')).read()
    assert covered == [] and 'Not covered: MaskFormer' in readme


@pytest.mark.parametrize('shapes', [MULTIPLES, SAME], ids=['padded', 'no-mask'])
@pytest.mark.parametrize('name', NAMES)
def test_sine_is_bit_identical_to_stock(name, shapes):
    """Same state-dict keys, weights loaded strictly both ways, equal tensors, losses and
    predictions. (Mask2Former: our pixel decoder masks padding inside our head, so on the
    padded batch it runs inside the stock head, where it gets no image shapes.)

    Built at the same seed, ``'sine'`` is also initialised exactly as the stock model: every
    tensor of the state dict is equal before any weights are loaded (the encoder is built once,
    by the host, and turned into its PEG version in place)."""
    stock = build_model(name)
    if SPECS[name]['kind'] in ('mask2former', 'seg') and shapes is MULTIPLES:
        ours = copy.deepcopy(stock)
        head = ours.panoptic_head if hasattr(ours, 'panoptic_head') else ours.decode_head
        head.pixel_decoder = pixel_decoder_of(build_model(name, 'sine'))
    else:
        ours = build_model(name, 'sine', **SPECS[name].get('as_stock', {}))
        differ = [k for k, v in stock.state_dict().items()
                  if not torch.equal(v, ours.state_dict()[k])]
        assert not differ, f'{len(differ)} tensors differ at the same seed, e.g. {differ[:3]}'
    assert list(stock.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(stock.state_dict(), strict=True)
    t_stock, l_stock, p_stock = run_modes(name, stock, shapes)
    t_ours, l_ours, p_ours = run_modes(name, ours, shapes)
    a, b = _flat(t_stock), _flat(t_ours)
    assert (a or SPECS[name]['kind'] == 'seg') and len(a) == len(b)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert l_stock.keys() == l_ours.keys()
    for key in l_stock:
        assert torch.equal(l_stock[key], l_ours[key]), key
    a, b = _flat(p_stock), _flat(p_ours)
    assert a and len(a) == len(b)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ------------------------------------------------------------------ padding invariance

def _randomise(model, seed=0):
    """Non-trivial weights everywhere after the backbone (mmdet zero-initialises the sampling
    offsets) and non-trivial BatchNorm running statistics (eval mode)."""
    gen = torch.Generator().manual_seed(seed + 1)
    for name, p in model.named_parameters():
        if not name.startswith('backbone'):
            p.data.normal_(0, 0.3 if p.dim() > 1 else 0.1, generator=gen)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_var.uniform_(0.5, 2.0, generator=gen)
    return model.eval()


def invariance_model(name, encoder_pos):
    """The model (ours, or stock for None) with a backbone whose features do not depend on
    the padding, and mmposenc's padding-aware neck for the Deformable-DETR family."""
    kwargs = dict(peg_after=(-1, 0)) if encoder_pos and 'peg' in encoder_pos else {}
    spec = SPECS[name]
    if spec['kind'] == 'deformable' and encoder_pos is not None:
        cfg = spec['cfg'](type=spec['ours'], encoder_pos=encoder_pos, **kwargs)
        cfg['neck']['type'] = 'mmposenc.MaskedChannelMapper'
        torch.manual_seed(0)
        model = build(cfg)
    else:
        model = build_model(name, encoder_pos, **kwargs)
    if spec['kind'] == 'detr':
        model.backbone = SubsampleBackbone((32, ), (128, ))
    elif spec['kind'] == 'deformable':
        model.backbone = SubsampleBackbone((16, 32), (64, 128))
    else:
        model.backbone = SubsampleBackbone((4, 8, 16, 32), (16, 32, 64, 128))
    return _randomise(model)


def load_images(root, kind):
    """The images of test_padding_exact_detectors.py through the host's test pipeline
    (Resize to sizes that are not multiples of any stride)."""
    from mmcv.transforms import LoadImageFromFile
    if kind == 'seg':
        from mmseg.datasets.transforms import PackSegInputs
        from mmseg.datasets.transforms import Resize
        pack = PackSegInputs(meta_keys=('img_path', 'ori_shape', 'img_shape', 'scale_factor'))
    else:
        from mmdet.datasets.transforms import PackDetInputs, Resize
        pack = PackDetInputs(meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                        'scale_factor'))
    out = []
    for i, (file, scale) in enumerate(IMAGES):
        results = LoadImageFromFile()(dict(img_path=f'{root}/train2017/{file}', img_id=i))
        out.append(pack(Resize(scale=scale, keep_ratio=True)(results)))
    assert tuple(out[0]['data_samples'].img_shape) == (190, 253)
    return out


def detector_outputs(model, packed):
    """Encoder memory per level as (bs, h, w, C) maps, and the head's last-layer class scores
    and boxes (normalised to each image) of every query, on the batch of ``packed``."""
    import inspect
    data = model.data_preprocessor(
        dict(inputs=[p['inputs'] for p in packed],
             data_samples=[copy.deepcopy(p['data_samples']) for p in packed]), False)
    inputs, samples = data['inputs'], data['data_samples']
    with torch.no_grad():
        if hasattr(model, '_samples_for_neck'):  # ExactPaddingMixin: the neck gets masks
            feats = model.extract_feat(inputs, samples)
        else:
            feats = model.extract_feat(inputs)
        enc, _ = model.pre_transformer(feats, samples)
        memory = model.forward_encoder(**enc)['memory']
        head_inputs = model.forward_transformer(feats, samples)
        accepted = inspect.signature(model.bbox_head.forward).parameters
        cls_scores, boxes = model.bbox_head(
            **{k: v for k, v in head_inputs.items() if k in accepted})
    sizes = [f.shape[-2:] for f in feats]
    maps = memory.split([h * w for h, w in sizes], 1)
    maps = [m.reshape(m.shape[0], h, w, -1) for m, (h, w) in zip(maps, sizes)]
    return maps, cls_scores[-1], boxes[-1]


def detector_alone_vs_batched(model, packed):
    """Largest |difference| between the first image alone and in the batch: encoder memory
    on its valid tokens; class scores and normalised boxes of every query."""
    alone, cls_alone, boxes_alone = detector_outputs(model, packed[:1])
    batched, cls_batch, boxes_batch = detector_outputs(model, packed)
    memory = max((b[0, :a.shape[1], :a.shape[2]] - a[0]).abs().max().item()
                 for a, b in zip(alone, batched))
    return (memory, (cls_batch[0] - cls_alone[0]).abs().max().item(),
            (boxes_batch[0] - boxes_alone[0]).abs().max().item())


def pixel_decoder_memory(model, packed):
    """Encoder memory of the pixel decoder per level (strides 32, 16, 8) as (bs, C, h, w), the
    batch padded by the host's data preprocessor (mmseg: its training-time padding; mmseg
    tests one size per batch)."""
    training = hasattr(model, 'decode_head')
    data = model.data_preprocessor(
        dict(inputs=[p['inputs'] for p in packed],
             data_samples=[copy.deepcopy(p['data_samples']) for p in packed]), training)
    samples = data['data_samples']
    decoder = pixel_decoder_of(model)
    with torch.no_grad():
        feats = model.extract_feat(data['inputs'])
        if hasattr(decoder, 'image_shapes'):
            with decoder.image_shapes([s.img_shape for s in samples]):
                _, outs = decoder(feats)
        else:
            _, outs = decoder(feats)
    return outs


def pixel_decoder_alone_vs_batched(model, packed):
    alone = pixel_decoder_memory(model, packed[:1])
    batched = pixel_decoder_memory(model, packed)
    return max((b[0, :, :a.shape[2], :a.shape[3]] - a[0]).abs().max().item()
               for a, b in zip(alone, batched))


@pytest.fixture(scope='module')
def coco_images(coco128_root):
    return {kind: load_images(coco128_root, kind) for kind in ('det', 'seg')}


@pytest.mark.parametrize('encoder_pos', ENCODER_POS)
@pytest.mark.parametrize('name', NAMES)
def test_encoder_is_padding_invariant_on_real_images(coco_images, name, encoder_pos):
    model = invariance_model(name, encoder_pos)
    packed = coco_images['seg' if SPECS[name]['kind'] == 'seg' else 'det']
    if is_mask2former(model):
        assert pixel_decoder_alone_vs_batched(model, packed) <= 1e-5
        return
    memory, scores, boxes = detector_alone_vs_batched(model, packed)
    assert memory <= 1e-5, memory
    # DINO (exact_queries): its boxes refined layer by layer through inverse sigmoids, 7e-5 px
    assert scores <= 1e-5 and boxes <= SPECS[name].get('box_tol', 1e-5), (scores, boxes)


@pytest.mark.parametrize('name', NAMES)
def test_the_stock_model_fails_the_same_comparison(coco_images, name):
    model = invariance_model(name, None)
    packed = coco_images['seg' if SPECS[name]['kind'] == 'seg' else 'det']
    if is_mask2former(model):
        memory = pixel_decoder_alone_vs_batched(model, packed)
    else:
        memory, _, _ = detector_alone_vs_batched(model, packed)
    assert memory > 1e-3, memory


# ------------------------------------------------------------------ no-mask path, gradients

@pytest.mark.parametrize('name', NAMES)
def test_no_mask_path_gives_the_pegs_no_mask(name, monkeypatch):
    model = build_model(name, 'peg')
    peg = encoder_of(model).pegs[0]
    seen = []
    original = peg.forward

    def spy(x, *args, key_padding_mask=None, **kwargs):
        seen.append(key_padding_mask)
        return original(x, *args, key_padding_mask=key_padding_mask, **kwargs)

    monkeypatch.setattr(peg, 'forward', spy)
    run_modes(name, model, SAME)
    assert seen and all(m is None for m in seen)
    seen.clear()
    if SPECS[name]['kind'] == 'seg':  # mmseg evaluates one size per batch: nothing padded
        packed = packed_batch(name, PADDED)
        model.train()
        model(**model.data_preprocessor(packed, True), mode='loss')
    else:  # padded: a mask in every mode (tensor, predict, loss)
        run_modes(name, model, PADDED)
    assert seen and all(m is not None and m.any() for m in seen)


@pytest.mark.parametrize('encoder_pos', ['peg', 'sine+peg', 'cape+peg', 'none'])
@pytest.mark.parametrize('name', NAMES)
def test_gradients_reach_every_peg_parameter(name, encoder_pos):
    pegs = {} if encoder_pos == 'none' else dict(peg_after=(-1, 0))  # refused without PEG
    model = build_model(name, encoder_pos, **pegs)
    assert len(encoder_of(model).pegs) == (0 if encoder_pos == 'none' else 2)
    _, losses, _ = run_modes(name, model, PADDED)
    sum(v for k, v in losses.items() if 'loss' in k).backward()
    prefix = 'encoder.' if not is_mask2former(model) else (
        'panoptic_head.pixel_decoder.encoder.' if hasattr(model, 'panoptic_head') else
        'decode_head.pixel_decoder.encoder.')
    unused = tuple(prefix + u[len('encoder.'):]
                   for u in SPECS[name].get('unused', {}).get(encoder_pos, ()))
    pegs = 0
    for n, p in model.named_parameters():
        if not p.requires_grad or n.startswith('backbone'):
            continue
        if n.startswith(unused):
            assert p.grad is None, n  # documented as unused in this mode
            continue
        assert p.grad is not None, n
        if '.pegs.' in n:
            pegs += 1
            assert p.grad.abs().sum() > 0, n
    assert pegs == (0 if encoder_pos == 'none' else 2 * len(list(
        encoder_of(model).pegs[0].parameters())))


@pytest.mark.parametrize('name', NAMES)
def test_peg_init_cfg_is_applied_after_the_host_initialisation(name):
    """An ``init_cfg`` in ``peg_cfg`` is the PEGs' initialisation: neither the host's xavier on
    the encoder weights nor the PEG convolutions' default reset (in ``init_weights``) may
    overwrite it, also when ``init_weights`` runs a second time."""
    peg_type = ('mmposenc.MaskedPEG' if SPECS[name]['kind'] == 'detr' else
                'mmposenc.MultiLevelMaskedPEG')
    init_cfg = [dict(type='Constant', layer='Conv2d', val=0.25),
                dict(type='Constant', layer='_BatchNorm', val=0.5, bias=0.125)]
    model = build_model(name, 'peg', peg_after=(-1, 0),
                        peg_cfg=dict(type=peg_type, init_cfg=init_cfg))
    for _ in range(2):  # build_model initialised once; a second init_weights keeps it
        convs = [m for m in encoder_of(model).pegs.modules() if isinstance(m, nn.Conv2d)]
        norms = [m for m in encoder_of(model).pegs.modules() if isinstance(m, nn.BatchNorm2d)]
        assert convs and norms
        assert all(bool((m.weight == 0.25).all()) for m in convs)
        assert all(bool((m.weight == 0.5).all() and (m.bias == 0.125).all()) for m in norms)
        model.init_weights()
    # without an init_cfg the PEG convolutions get torch's default (kaiming-uniform bound
    # 1 / sqrt(fan_in) for a depthwise 3x3 kernel), not the host's xavier
    model = build_model(name, 'peg', peg_after=(0, ))
    for m in encoder_of(model).pegs.modules():
        if isinstance(m, nn.Conv2d):
            assert float(m.weight.abs().max()) <= 1 / 3 and float(m.weight.std()) > 0.05


@pytest.mark.parametrize('name', NAMES)
def test_state_dict_is_stock_plus_pegs_and_bad_config_raises(name):
    stock = set(build_model(name).state_dict())
    model = build_model(name, 'sine+peg', peg_after=(-1, 1))
    ours = set(model.state_dict())
    assert stock < ours
    assert all('.encoder.pegs.' in '.' + k for k in ours - stock)
    # one PEG per position of peg_after, nothing else added
    assert encoder_of(model).peg_after == (-1, 1)
    assert {k.split('.encoder.pegs.')[-1].split('.')[0] for k in ('.' + k for k in ours - stock)
            } == {'0', '1'}
    with pytest.raises(ValueError, match='encoder_pos'):
        build_model(name, 'rope')
    with pytest.raises(ValueError, match='peg_after'):
        build_model(name, 'peg', peg_after=(2, ))


# ------------------------------------------------------------------ ONNX

# mmseg's segmentors are not exported by the tool; PEGDETR and PEGDeformableDETR are exported in
# tests/test_deployment/test_pytorch2onnx.py
ONNX_NAMES = [n for n in NAMES if SPECS[n]['kind'] != 'seg'
              and n not in ('PEGDETR', 'PEGDeformableDETR')]


@pytest.mark.parametrize('encoder_pos', [None, 'peg'])
@pytest.mark.parametrize('name', ONNX_NAMES)
def test_onnx_export_matches_torch(name, encoder_pos, tmp_path):
    """tools/deployment/pytorch2onnx.py's export of the stock model and of ours, dynamic
    height and width, checked in onnxruntime at sizes other than the traced one."""
    pytest.importorskip('onnxruntime')
    from conftest import REPO_ROOT
    sys.path.insert(0, osp.join(REPO_ROOT, 'tools', 'deployment'))
    import pytorch2onnx as p2o
    wrapper = p2o.wrap_model(build_model(name, encoder_pos))
    out = p2o.export(wrapper, str(tmp_path / 'model.onnx'), shape=(96, 128))
    rows = p2o.check(wrapper, out, [(128, 96), (70, 90)], atol=p2o.DEFAULT_ATOL)
    assert all(r['ok'] for r in rows), rows
    if SPECS[name]['kind'] == 'mask2former':  # mask logits at stride 4 of each input
        assert [r['outputs']['mask_preds'][2:] for r in rows] == [(32, 24), (18, 23)]


@pytest.mark.parametrize('name', NAMES)
def test_a_deep_copy_runs_its_own_pegs(name):
    """The PEGs after layers are forward hooks of the encoder: a deep copy (EMA models,
    mmengine's model wrappers) must call the copy's PEGs, not the original's."""
    model = build_model(name, 'peg', peg_after=(-1, 0, 1))
    copied = copy.deepcopy(model)
    encoder = encoder_of(copied)
    for position in (0, 1):
        (hook, ) = encoder.layers[position]._forward_hooks.values()
        assert hook.func.__self__ is encoder
    for p in encoder.pegs.parameters():  # the copy's PEGs now differ from the original's
        p.data.add_(1.0)

    def predictions(m):  # eval mode: no running statistics move
        data = m.data_preprocessor(copy.deepcopy(packed_batch(name, SAME)), False)
        m.eval()
        with torch.no_grad():
            return _flat(m(**data, mode='predict'))

    a, b, c = predictions(model), predictions(copied), predictions(model)
    assert a and all(torch.equal(x, y) for x, y in zip(a, c))
    assert not all(torch.equal(x, y) for x, y in zip(a, b))
