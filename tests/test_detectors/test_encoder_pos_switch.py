"""The encoder position switch: arguments a mode would ignore are refused. (That
``encoder_pos='sine'`` is initialised exactly as the stock model at the same seed is checked
in test_encoder_pos_models.py::test_sine_is_bit_identical_to_stock, which builds both.)"""
import glob
import os.path as osp

import pytest
from test_encoder_pos_models import SPECS, build_model

from mmposenc.models.detectors.encoder_pos import check_ablation_args

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

#: (arguments, the message): each would be silently ignored by its encoder_pos
IGNORED = [
    (dict(encoder_pos='sine', peg_after=(0, )), r"peg_after=\(0,\) has no effect with "
     r"encoder_pos='sine'; use encoder_pos='peg', 'sine\+peg' or 'cape\+peg' or remove"),
    (dict(encoder_pos='cape', peg_cfg=dict(type='mmposenc.MaskedPEG')),
     r"peg_cfg=.* has no effect with encoder_pos='cape'"),
    (dict(encoder_pos='none', peg_after=(-1, 0)), r"peg_after=.* encoder_pos='none'"),
    (dict(encoder_pos='peg', cape_cfg=dict(type='mmposenc.CAPE2d')),
     r"cape_cfg=.* has no effect with encoder_pos='peg'; use encoder_pos='cape' or "
     r"'cape\+peg'"),
    (dict(encoder_pos='sine', level_embed=False),
     r"level_embed=False has no effect with encoder_pos='sine' \(the sine encoding is always "
     r'added with the level embedding'),
    (dict(encoder_pos='sine+peg', level_embed=False), r'level_embed=False has no effect'),
]


@pytest.mark.parametrize('name', ['PEGDETR', 'PEGDeformableDETR',
                                  'PEGMSDeformAttnPixelDecoder@mmdet'])
@pytest.mark.parametrize('kwargs,message', IGNORED, ids=lambda v: str(v)[:40])
def test_arguments_the_mode_ignores_are_refused(name, kwargs, message):
    """One ValueError line naming the class, the argument and the fix (level_embed exists on
    the multi-level models only)."""
    kwargs = dict(kwargs)
    if 'level_embed' in kwargs and SPECS[name]['kind'] == 'detr':
        pytest.skip('single-level models have no level_embed')
    cls = name.split('@')[0]
    with pytest.raises(ValueError, match=rf'^{cls}: {message}') as info:
        build_model(name, kwargs.pop('encoder_pos'), **kwargs)
    assert '\n' not in str(info.value)


def test_what_each_mode_uses_is_accepted():
    for encoder_pos in ('peg', 'sine+peg', 'cape+peg'):
        check_ablation_args('X', encoder_pos, peg_after=(0, ), peg_cfg={})
    for encoder_pos in ('cape', 'cape+peg'):
        check_ablation_args('X', encoder_pos, cape_cfg={})
    for encoder_pos in ('peg', 'cape', 'cape+peg', 'none'):
        check_ablation_args('X', encoder_pos, level_embed=False)
    model = build_model('PEGDeformableDETR', 'peg', level_embed=False)
    assert 'level_embed=False' in repr(model) and not model.use_level_embed


def _switches(cfg):
    """The dicts of a config's model that hold an encoder position switch."""
    model = cfg.get('model', {})
    for head in ('panoptic_head', 'decode_head'):
        if head in model and 'encoder_pos' in model[head].get('pixel_decoder', {}):
            yield model[head]['pixel_decoder']
    if 'encoder_pos' in model:
        yield model


def test_no_shipped_config_sets_an_ignored_argument():
    """Every shipped config with an encoder position switch passes the same check as the
    constructors (tests/test_configs build them)."""
    from mmengine.config import Config

    import mmposenc  # noqa: F401  (mmdet:: / mmseg:: bases)
    checked = 0
    for path in sorted(glob.glob(osp.join(REPO, 'configs', '**', '*.py'), recursive=True)):
        if 'encoder_pos' not in open(path, encoding='utf-8').read():
            continue
        for switch in _switches(Config.fromfile(path)):
            check_ablation_args(osp.basename(path), switch.get('encoder_pos', 'peg'),
                                switch.get('peg_after'), switch.get('peg_cfg'),
                                switch.get('cape_cfg'), switch.get('level_embed'))
            checked += 1
    assert checked >= 30



def _switch_errors():
    """The messages of the switch's errors, raised by building the models."""
    messages = []
    for name, kwargs in [
            ('PEGDETR', dict(encoder_pos='bad')),
            ('PEGDETR', dict(encoder_pos='peg', peg_after=(5, ))),
            ('PEGDETR', dict(encoder_pos='sine', peg_after=(0, 1))),
            ('PEGDeformableDETR', dict(encoder_pos='rope_mixed', peg_after=(0, ))),
            ('PEGDETR', dict(encoder_pos=dict(mode='peg', peg_after=(0, )), peg_after=(0, 1))),
    ]:
        kwargs = dict(kwargs)
        with pytest.raises(ValueError) as info:
            build_model(name, kwargs.pop('encoder_pos'), **kwargs)
        messages.append(f'ValueError: {info.value}')
    return messages


def test_faq_quotes_the_switch_errors_as_raised():
    """Every error of the switch that docs/faq.md quotes is the text the code raises (``...``
    standing for any text), and the FAQ quotes each of them."""
    import re
    faq = open(osp.join(REPO, 'docs', 'faq.md'), encoding='utf-8').read()
    quotes = [q for line in faq.splitlines() if line.startswith('**`')
              for q in re.findall(r'`(ValueError: [^`]*)`', line)
              if re.search(r'encoder_pos|peg_after|rotary encodings', q)]
    messages = _switch_errors()
    assert len(quotes) >= len(messages)
    patterns = [re.compile('.*'.join(map(re.escape, q.split('...'))), re.DOTALL) for q in quotes]
    for quote, pattern in zip(quotes, patterns):
        assert any(pattern.fullmatch(m) for m in messages), (quote, messages)
    for message in messages:
        assert any(p.fullmatch(message) for p in patterns), message
