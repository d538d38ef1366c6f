"""Every ablation of the encoder position is one line: ``--cfg-options <switch>.encoder_pos=<mode>``
on every shipped config with the switch (DETR, Deformable-DETR, Conditional-DETR, DAB-DETR,
DINO, Mask2Former's pixel decoder) and on a user's config inheriting one by ``mmposenc::``,
for every mode the host runs; a mode it cannot run is refused first, with the reason, in one
line; an option the chosen mode would not use is still refused, never dropped.

The option values are parsed as ``--cfg-options`` parses them (mmengine's ``DictAction``) and
merged with ``Config.merge_from_dict``, as tools/train.py does; each switched config builds its
model, and the small ``*_shapes`` configs also run one forward.
"""
import argparse
import glob
import os.path as osp

import pytest
import torch

pytest.importorskip('mmdet')

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FOLDERS = ('peg_detr', 'peg_deformable_detr', 'peg_conditional_detr', 'peg_dab_detr', 'peg_dino',
           'peg_mask2former')
CONFIGS = sorted(p for f in FOLDERS for p in glob.glob(osp.join(REPO, 'configs', f, '*.py')))
ROTARY = ('rope_mixed', 'rope_mixed+peg', 'rope_dinov3', 'rope_dinov3+peg')


def cfg_options(*pairs):
    """``--cfg-options k=v ...`` as mmengine's ``DictAction`` parses it."""
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser()
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    return parser.parse_args(['--cfg-options', *pairs]).cfg_options


def load(path):
    from mmengine.config import Config

    import mmposenc  # noqa: F401  (the mmposenc:: / mmdet:: / mmseg:: bases)
    return Config.fromfile(path)


def switch_key(cfg):
    """The dotted key of the config's ``encoder_pos`` (the model's, or its pixel decoder's)."""
    for head in ('panoptic_head', 'decode_head'):
        if head in cfg.model:
            return f'model.{head}.pixel_decoder.encoder_pos'
    return 'model.encoder_pos'


def switch_class(cfg):
    """The registered class that takes the config's switch."""
    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    part = cfg.model
    for head in ('panoptic_head', 'decode_head'):
        if head in part:
            part = part[head].pixel_decoder
    return MODELS.get(part.type)


def build(cfg):
    from mmengine.registry import init_default_scope

    from mmposenc.registry import MODELS
    scope = cfg.get('default_scope', 'mmdet')
    if scope == 'mmseg':
        from mmseg.utils import register_all_modules
        register_all_modules(init_default_scope=False)
    init_default_scope(scope)
    cfg.model.backbone.init_cfg = None
    return MODELS.build(cfg.model)


def switch_of(model):
    """The module holding the switch: the detector, or the pixel decoder."""
    for head in ('panoptic_head', 'decode_head'):
        if hasattr(model, head):
            return getattr(model, head).pixel_decoder
    return model


def check_mode(model, mode):
    """The model runs ``mode``: the mode's parts and only those are built, with the mode's
    defaults (one PEG after encoder layer 0)."""
    switch = switch_of(model)
    assert switch.encoder_pos == mode
    assert switch.encoder.peg_after == ((0, ) if 'peg' in mode else ())
    assert len(switch.encoder.pegs) == ('peg' in mode)
    assert (switch.cape is not None) == mode.startswith('cape')
    assert (switch.rope is not None) == mode.startswith('rope')


def tiny_forward(model):
    """One forward in tensor mode of a 1-image batch (the small ``*_shapes`` models only)."""
    from mmdet.structures import DetDataSample
    sample = DetDataSample(metainfo=dict(img_shape=(64, 80), pad_shape=(64, 96),
                                         batch_input_shape=(64, 96)))
    torch.manual_seed(0)
    # mmdet allocates parameters such as DeformableDETR.level_embed uninitialised
    # (torch.Tensor(n, c)) until init_weights: without it the output may be NaN by chance
    model.init_weights()
    model.eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 96), [sample], mode='tensor')
    assert all(torch.isfinite(t).all() for t in out if torch.is_tensor(t))


def test_every_switch_config_is_covered():
    """The folders hold every shipped config with an encoder position switch."""
    found = [p for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
             if 'encoder_pos' in open(p, encoding='utf-8').read()]
    assert set(found) <= set(CONFIGS) and len(CONFIGS) >= 40


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_every_supported_mode_is_one_line(path):
    """``--cfg-options <switch>=<mode>`` builds the mode for every mode the host runs, and a
    rotary mode on a deformable host is refused first, in one line, with the reason."""
    base = load(path)
    key, cls = switch_key(base), switch_class(base)
    assert set(cls.supported_modes()) == {
        'sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none',
        *(ROTARY if cls.supports_rotary else ())}
    for mode in ('sine', 'peg', 'sine+peg', 'cape', 'cape+peg', 'none', *ROTARY):
        cfg = load(path)
        cfg.merge_from_dict(cfg_options(f'{key}={mode}'))
        if mode not in cls.supported_modes():
            with pytest.raises(ValueError) as info:
                build(cfg)
            message = str(info.value)
            assert message.startswith(f'{cls.__name__}: rotary encodings need dot-product '
                                      'attention'), message
            assert '\n' not in message and f'encoder_pos={mode!r}' in message
            continue
        model = build(cfg)
        check_mode(model, mode)
        if path.endswith('_shapes.py'):
            tiny_forward(model)


USER_CONFIG = """\
# a user's config, outside the repository, inheriting a shipped one
_base_ = 'mmposenc::{base}'
model = dict({model})
"""


def user_config(tmp_path, base, model=''):
    path = tmp_path / 'user.py'
    path.write_text(USER_CONFIG.format(base=base, model=model))
    return load(str(path))


@pytest.mark.parametrize('base', [
    'peg_detr/detr-peg_r50_16xb2-50e_coco.py',
    'peg_detr/detr-algo2-peg_r50_16xb2-50e_coco.py',
    'peg_deformable_detr/deformable-detr-peg_r18-quarter_1xb4-2500i_shapes.py',
])
def test_user_config_ablation_is_one_line(tmp_path, base):
    """A user's config inheriting a shipped PEG config: every mode of its host is one line."""
    cls = switch_class(user_config(tmp_path, base, 'num_queries=20'))
    for mode in cls.supported_modes():
        cfg = user_config(tmp_path, base, 'num_queries=20')
        cfg.merge_from_dict(cfg_options(f'model.encoder_pos={mode}'))
        model = build(cfg)
        check_mode(model, mode)
        assert model.num_queries == 20


def test_user_options_go_with_the_mode_or_are_refused(tmp_path):
    """A user's own option: in the mode's value it is replaced with the mode; as an argument
    of its own (configs written before) it still works, and a mode that would not use it is
    refused, with the fix; given both ways it is refused."""
    base = 'peg_detr/detr-peg_r50_16xb2-50e_coco.py'
    # in the mode's value (the base's value is a string: _delete_)
    in_mode = "encoder_pos=dict(_delete_=True, mode='peg', peg_after=(-1, 0))"
    assert build(user_config(tmp_path, base, in_mode)).encoder.peg_after == (-1, 0)
    cfg = user_config(tmp_path, base, in_mode)
    cfg.merge_from_dict(cfg_options('model.encoder_pos=sine'))
    check_mode(build(cfg), 'sine')
    # as an argument of its own
    own = 'peg_after=(0, 1)'
    assert build(user_config(tmp_path, base, own)).encoder.peg_after == (0, 1)
    cfg = user_config(tmp_path, base, own)
    cfg.merge_from_dict(cfg_options('model.encoder_pos=sine'))
    with pytest.raises(ValueError, match=r"^PEGDETR: peg_after=\(0, 1\) has no effect with "
                       r"encoder_pos='sine'; .* or remove peg_after \(peg_after=None;") as info:
        build(cfg)
    assert '\n' not in str(info.value)
    cfg = user_config(tmp_path, base, own)  # the fix the message names, on the command line
    cfg.merge_from_dict(cfg_options('model.encoder_pos=sine', 'model.peg_after=None'))
    check_mode(build(cfg), 'sine')
    # both ways
    cfg = user_config(tmp_path, base, in_mode + ', peg_after=(0, 1)')
    with pytest.raises(ValueError, match=r'^PEGDETR: peg_after is given twice'):
        build(cfg)


def test_unsupported_mode_is_refused_before_unused_options(tmp_path):
    """A PEG-Deformable-DETR switched to a rotary mode hears why rotary modes do not run there,
    not about the PEG options the rotary mode would leave unused (the PEG config's own and a
    user's)."""
    base = 'peg_deformable_detr/deformable-detr-algo2-peg_r50-ss_16xb2-50e_coco.py'
    for model in ('', 'peg_after=(0, 1)'):
        cfg = user_config(tmp_path, base, model)
        cfg.merge_from_dict(cfg_options('model.encoder_pos.mode=rope_mixed'))
        with pytest.raises(ValueError, match=r'^PEGDeformableDETR: rotary encodings need '
                           r'dot-product attention, .*no q.k product'):
            build(cfg)
