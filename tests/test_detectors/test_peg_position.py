"""Where the PEGs sit in every DETR-family detector, and DINO's 'peg' mode without sine.

``peg_after=(i, )`` means "the PEG's input is encoder layer ``i``'s output" (``-1``: the
encoder's input) and the next layer's input is the PEG's output, as the CPVT backbone asserts
of its ``pos_block``. The tests hold the public modules (``model.encoder.layers``,
``model.encoder.pegs``) and watch them with forward hooks: they do not depend on how the hooks
of the encoder are installed. A PEG hooked after another layer (``layers[-1]`` or
``layers[i - 1]`` instead of ``layers[i]``) fails them; the padding-invariance suite catches it
only indirectly, on real images.

The 'peg' mode of the multi-level detectors (Deformable-DETR and DINO) gives the encoder the
level embedding and nothing else: the sine module is never called and the encoder's
``query_pos`` is exactly the level embedding of each token.
"""
import pytest
import torch
from tiny_detr_cfgs import (build, conditional_detr_cfg, dab_detr_cfg, deformable_detr_cfg,
                            detr_cfg, dino_cfg, packed_inputs)

pytest.importorskip('mmdet')

NUM_LAYERS = 3
#: detector -> its tiny config
DETECTORS = {
    'PEGDETR': detr_cfg,
    'PEGConditionalDETR': conditional_detr_cfg,
    'PEGDABDETR': dab_detr_cfg,
    'PEGDeformableDETR': deformable_detr_cfg,
    'PEGDINO': dino_cfg,
}
#: padded batch (images of two sizes)
SHAPES = [(3, 96, 80), (3, 64, 112)]


def build_detector(name, **switch):
    """``mmposenc.<name>`` with a 3-layer encoder and the encoder-switch arguments ``switch``."""
    cfg = DETECTORS[name](type=f'mmposenc.{name}', **switch)
    cfg['encoder']['num_layers'] = NUM_LAYERS
    torch.manual_seed(0)
    return build(cfg).eval()


def _first_arg(args, kwargs, name):
    return args[0] if args else kwargs[name]


def _keep(store, key, value):
    """``store[key] = value`` the first time (a hook that returns None)."""
    store.setdefault(key, value)


def run_and_watch(model):
    """Run the model (tensor mode) on a padded batch; the tensors seen at the encoder's input,
    at every layer's input and output (before any hook of the model on that layer) and at
    every PEG's input and output."""
    encoder = model.encoder
    seen = dict(layer_in={}, layer_out={}, peg_in={}, peg_out={})
    handles = [encoder.register_forward_pre_hook(
        lambda m, args, kwargs: _keep(seen, 'encoder_in', [_first_arg(args, kwargs, 'query')]),
        with_kwargs=True)]
    for j, layer in enumerate(encoder.layers):
        handles.append(layer.register_forward_pre_hook(
            lambda m, args, kwargs, j=j: _keep(seen['layer_in'], j,
                                               _first_arg(args, kwargs, 'query')),
            with_kwargs=True))
        # prepend: before the model's own hook on this layer replaces the output
        handles.append(layer.register_forward_hook(
            lambda m, args, out, j=j: _keep(seen['layer_out'], j, out), prepend=True))
    for k, peg in enumerate(encoder.pegs):
        handles.append(peg.register_forward_pre_hook(
            lambda m, args, kwargs, k=k: _keep(seen['peg_in'], k, args[0]),
            with_kwargs=True))
        handles.append(peg.register_forward_hook(
            lambda m, args, out, k=k: _keep(seen['peg_out'], k, out)))
    try:
        data = model.data_preprocessor(packed_inputs(SHAPES, num_items=[1, 2]), False)
        with torch.no_grad():
            model(**data, mode='tensor')
    finally:
        for h in handles:
            h.remove()
    assert len(seen['encoder_in']) == 1
    assert sorted(seen['layer_in']) == sorted(seen['layer_out']) == list(range(NUM_LAYERS))
    return seen


def check_peg_positions(model, peg_after):
    """Each PEG ``k`` takes the output of layer ``peg_after[k]`` (the encoder input for -1) and
    feeds the next layer; every other layer feeds the next one directly."""
    encoder = model.encoder
    assert len(encoder.pegs) == len(peg_after)
    seen = run_and_watch(model)
    assert sorted(seen['peg_in']) == list(range(len(peg_after))), 'a PEG did not run'
    into = {}  # position -> PEG index
    for k, i in enumerate(sorted(peg_after)):
        into[i] = k
        source = seen['encoder_in'][0] if i == -1 else seen['layer_out'][i]
        assert torch.equal(seen['peg_in'][k], source), \
            f'PEG {k} (peg_after {i}) does not take layer {i}\'s output'
        if i + 1 < NUM_LAYERS:
            assert torch.equal(seen['layer_in'][i + 1], seen['peg_out'][k]), \
                f'layer {i + 1} does not take the output of PEG {k}'
    for j in range(-1, NUM_LAYERS - 1):
        if j not in into:
            source = seen['encoder_in'][0] if j == -1 else seen['layer_out'][j]
            assert torch.equal(seen['layer_in'][j + 1], source), \
                f'something runs between layer {j} and layer {j + 1}'
    # the PEGs change the tokens (non-zero weights), so the chain above tells them apart
    for k in seen['peg_in']:
        assert not torch.equal(seen['peg_in'][k], seen['peg_out'][k])


def _randomise(model):
    gen = torch.Generator().manual_seed(1)
    for m in model.encoder.pegs.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.weight.data.normal_(0, 0.5, generator=gen)
    return model


@pytest.mark.parametrize('peg_after', [(1, ), (-1, 0, 2)], ids=['1', '-1,0,2'])
@pytest.mark.parametrize('name', sorted(DETECTORS))
def test_peg_input_is_the_output_of_its_layer(name, peg_after):
    model = _randomise(build_detector(name, encoder_pos='peg', peg_after=peg_after))
    check_peg_positions(model, peg_after)


@pytest.mark.parametrize('name', sorted(DETECTORS))
def test_default_peg_sits_after_the_first_layer(name):
    """CPVT's placement, ``peg_after=(0, )``, is every detector's default."""
    model = _randomise(build_detector(name, encoder_pos='peg'))
    check_peg_positions(model, (0, ))


def test_check_fails_on_a_peg_after_the_wrong_layer():
    """The check itself can fail: a PEG moved by hand onto the last layer is found."""
    model = _randomise(build_detector('PEGDETR', encoder_pos='peg', peg_after=(0, )))
    layers = model.encoder.layers
    first, last = layers[0], layers[NUM_LAYERS - 1]
    last._forward_hooks.update(first._forward_hooks)  # with the kwargs flag of each hook
    last._forward_hooks_with_kwargs.update(first._forward_hooks_with_kwargs)
    first._forward_hooks.clear()
    first._forward_hooks_with_kwargs.clear()
    with pytest.raises(AssertionError, match='does not take layer 0'):
        check_peg_positions(model, (0, ))


# ---------------------------------------------------------------- 'peg' mode: no sine at all
def _level_embedding(model, seen_query_pos, spatial_shapes):
    bs = seen_query_pos.shape[0]
    return torch.cat([model.level_embed[lvl].view(1, 1, -1).expand(bs, int(h * w), -1)
                      for lvl, (h, w) in enumerate(spatial_shapes.tolist())], 1)


def watch_encoder_positions(model):
    """Run the model on a padded batch: the number of calls of its sine module and the
    encoder's ``query_pos`` and ``spatial_shapes``."""
    calls, seen = [], {}
    h1 = model.positional_encoding.register_forward_hook(lambda *a: calls.append(1))
    h2 = model.encoder.register_forward_pre_hook(
        lambda m, args, kwargs: seen.update(kwargs), with_kwargs=True)  # update: None
    try:
        data = model.data_preprocessor(packed_inputs(SHAPES, num_items=[1, 2]), False)
        with torch.no_grad():
            model(**data, mode='tensor')
    finally:
        h1.remove()
        h2.remove()
    return len(calls), seen['query_pos'], seen['spatial_shapes']


@pytest.mark.parametrize('name', ['PEGDeformableDETR', 'PEGDINO'])
def test_peg_mode_has_no_sine_only_the_level_embedding(name):
    """'peg': the sine module never runs and ``query_pos`` is exactly the level embedding
    (neither sine in its place nor sine added to it); 'sine+peg' runs it (the hook works)."""
    model = build_detector(name, encoder_pos='peg')
    with torch.no_grad():  # distinct level embeddings
        model.level_embed.normal_(generator=torch.Generator().manual_seed(0))
    calls, query_pos, shapes = watch_encoder_positions(model)
    assert calls == 0, f"{name} 'peg' ran its sine encoding"
    assert torch.equal(query_pos, _level_embedding(model, query_pos, shapes))
    both = build_detector(name, encoder_pos='sine+peg')
    with torch.no_grad():
        both.level_embed.copy_(model.level_embed)
    calls, query_pos, shapes = watch_encoder_positions(both)
    assert calls == len(shapes) and not torch.equal(query_pos,
                                                    _level_embedding(both, query_pos, shapes))
