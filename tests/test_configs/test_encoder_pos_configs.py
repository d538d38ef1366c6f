"""configs/peg_{conditional_detr,dab_detr,dino,mask2former}: every config inherits its host's
(mmdet's / mmseg's) and changes nothing but the encoder position switch (and the padding-aware
neck / head), the file name says which encoder_pos, the README links every config."""
import copy
import glob
import os.path as osp

import pytest
from peg_config_utils import as_host

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
FOLDERS = ('peg_conditional_detr', 'peg_dab_detr', 'peg_dino', 'peg_mask2former')
CONFIGS = sorted(p for f in FOLDERS for p in glob.glob(osp.join(REPO, 'configs', f, '*.py')))
EXPECTED_POS = {'sine': 'sine', 'nope': 'none', 'peg': 'peg'}
#: host config of each family (the part of our file name after the encoder_pos tag)
HOSTS = {
    'conditional-detr_r50_8xb2-50e_coco': 'mmdet::conditional_detr/'
                                          'conditional-detr_r50_8xb2-50e_coco.py',
    'dab-detr_r50_8xb2-50e_coco': 'mmdet::dab_detr/dab-detr_r50_8xb2-50e_coco.py',
    'dino-4scale_r50_8xb2-12e_coco': 'mmdet::dino/dino-4scale_r50_8xb2-12e_coco.py',
    'mask2former_r50_8xb2-lsj-50e_coco': 'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco.py',
    'mask2former_r50_8xb2-lsj-50e_coco-panoptic':
        'mmdet::mask2former/mask2former_r50_8xb2-lsj-50e_coco-panoptic.py',
    'mask2former_r50_8xb2-160k_ade20k-512x512':
        'mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
}
#: keys our configs set in the model (or its pixel decoder / head) on top of the host's
OURS = {'type', 'encoder_pos', 'decoder_pos', 'level_embed', 'peg_after', 'peg_cfg', 'neck'}


def _split(path):
    """(host key, encoder_pos tag) of one of our config names, e.g. 'dino-4scale-peg_r50...'."""
    stem = osp.splitext(osp.basename(path))[0]
    algo, rest = stem.split('_', 1)
    base, tag = algo.rsplit('-', 1)
    return f'{base}_{rest}', tag


def _load(path):
    from mmengine.config import Config

    import mmposenc  # noqa: F401  (the mmposenc:: / mmdet:: / mmseg:: bases)
    return Config.fromfile(path)


def _switch(model):
    """The config part holding encoder_pos, and the head holding it (None for detectors)."""
    for head in ('panoptic_head', 'decode_head'):
        if head in model:
            return model[head]['pixel_decoder'], model[head]
    return model, None


def test_every_family_has_sine_peg_and_none():
    found = {}
    for path in CONFIGS:
        host, tag = _split(path)
        found.setdefault(host, set()).add(tag)
    assert found == {host: {'sine', 'peg', 'nope'} for host in HOSTS}


@pytest.mark.parametrize('path', CONFIGS, ids=osp.basename)
def test_config_is_the_hosts_with_the_switch(path):
    host_key, tag = _split(path)
    cfg, host = _load(path), _load(HOSTS[host_key].replace(
        'mmdet::', osp.join(_host_root('mmdet'), '')).replace(
        'mmseg::', osp.join(_host_root('mmseg'), '')))
    assert 'mmposenc.models.detectors' in cfg.custom_imports.imports
    switch, head = _switch(cfg.model)
    assert switch.encoder_pos == EXPECTED_POS[tag]
    assert switch.type.startswith('mmposenc.')
    if head is not None:
        assert head.type.startswith('mmposenc.PaddingExact')
    if tag == 'peg':  # the mode's defaults (one PEG after encoder layer 0: built below), so
        # that --cfg-options ...encoder_pos=<mode> leaves no PEG option behind
        assert 'peg_after' not in switch and 'peg_cfg' not in switch
    # everything else is the host's (schedule, data, the model but for our keys), with
    # mmposenc's dataset check and optimizer log (as_host maps them back)
    for key in ('optim_wrapper', 'param_scheduler', 'train_cfg', 'train_dataloader',
                'test_dataloader', 'test_evaluator'):
        assert as_host(cfg[key]) == as_host(host[key]), key
    ours, stock = copy.deepcopy(as_host(cfg.model)), copy.deepcopy(as_host(host.model))
    for part in (ours, stock):
        sw, hd = _switch(part)
        for key in OURS:
            sw.pop(key, None)
            if hd is not None:
                hd.pop(key, None)
        if sw is part:  # our neck is the host's ChannelMapper made padding-exact
            part.pop('neck', None)
    assert ours == stock
    if 'dino' in host_key:
        assert cfg.model.neck.type == 'mmposenc.MaskedChannelMapper'
        assert as_host({k: v for k, v in cfg.model.neck.items() if k != 'type'}) == \
            as_host({k: v for k, v in host.model.neck.items() if k != 'type'})
    # DAB-DETR's position-scaling MLP is unused without encoder positions
    assert cfg.get('find_unused_parameters', False) == (
        'dab-detr' in host_key and tag in ('peg', 'nope'))


def _host_root(package):
    import importlib
    return osp.join(osp.dirname(importlib.import_module(package).__file__), '.mim', 'configs')


@pytest.mark.parametrize('path', [p for p in CONFIGS if _split(p)[1] == 'peg'], ids=osp.basename)
def test_peg_configs_build_with_one_peg(path):
    from mmengine.registry import init_default_scope

    import mmposenc.models.detectors  # noqa: F401
    from mmposenc.registry import MODELS
    cfg = _load(path)
    scope = 'mmseg' if 'ade20k' in path else 'mmdet'
    if scope == 'mmseg':
        from mmseg.utils import register_all_modules
        register_all_modules(init_default_scope=False)
    init_default_scope(scope)
    cfg.model.backbone.init_cfg = None
    model = MODELS.build(cfg.model)
    head = getattr(model, 'panoptic_head', None) or getattr(model, 'decode_head', None)
    encoder = head.pixel_decoder.encoder if head is not None else model.encoder
    assert len(encoder.pegs) == 1 and encoder.peg_after == (0, )
    params = [n for n, _ in model.named_parameters()]
    for key in cfg.optim_wrapper.get('paramwise_cfg', {}).get('custom_keys', {}):
        assert any(key in n for n in params), f'custom key {key!r} matches no parameter'


def test_readmes_link_every_config():
    for folder in FOLDERS:
        readme = open(osp.join(REPO, 'configs', folder, 'README.md')).read()
        for path in glob.glob(osp.join(REPO, 'configs', folder, '*.py')):
            assert f'({osp.basename(path)})' in readme, osp.basename(path)
