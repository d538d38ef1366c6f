"""Checkpoint converters: Twins/timm PCPVT -> PVTPEG and mmpretrain DeiT -> CPVT.

No download: the source checkpoints are produced in-process, by mmpretrain's own
``VisionTransformer`` (DeiT) and by a transcription of the official Twins ``CPVTV2`` forward
(Meituan-AutoML/Twins ``gvt.py``; timm's ``twins.py`` uses the same parameter names).
"""
import importlib.util
import os.path as osp

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mmposenc.models.backbones import CPVT, PVTPEG

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _load_tool(name):
    path = osp.join(ROOT, 'tools', 'model_converters', f'{name}.py')
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


twins_conv = _load_tool('twins_pcpvt_to_pvtpeg')
deit_conv = _load_tool('deit_to_cpvt')


# --- a transcription of the official Twins PCPVT (CPVTV2) classifier -------------------------
class _TwinsPatchEmbed(nn.Module):
    def __init__(self, patch, cin, cout):
        super().__init__()
        self.patch = patch
        self.proj = nn.Conv2d(cin, cout, patch, patch)
        self.norm = nn.LayerNorm(cout)

    def forward(self, x):
        x = self.proj(x)
        hw = x.shape[2:]
        return self.norm(x.flatten(2).transpose(1, 2)), hw


class _TwinsAttn(nn.Module):
    def __init__(self, dim, heads, sr):
        super().__init__()
        self.heads, self.sr_ratio = heads, sr
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, dim * 2)
        self.proj = nn.Linear(dim, dim)
        if sr > 1:
            self.sr = nn.Conv2d(dim, dim, sr, sr)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x, H, W):
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.heads, C // self.heads).permute(0, 2, 1, 3)
        if self.sr_ratio > 1:
            x_ = self.sr(x.permute(0, 2, 1).reshape(B, C, H, W)).reshape(B, C, -1)
            x = self.norm(x_.permute(0, 2, 1))
        kv = self.kv(x).reshape(B, -1, 2, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ kv[0].transpose(-2, -1)) * (C // self.heads)**-0.5
        x = (attn.softmax(-1) @ kv[1]).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class _TwinsMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class _TwinsBlock(nn.Module):
    def __init__(self, dim, heads, ratio, sr):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = _TwinsAttn(dim, heads, sr)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = _TwinsMlp(dim, int(dim * ratio))

    def forward(self, x, H, W):
        x = x + self.attn(self.norm1(x), H, W)
        return x + self.mlp(self.norm2(x))


class _TwinsPosCNN(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Sequential(nn.Conv2d(dim, dim, 3, 1, 1, groups=dim))

    def forward(self, x, H, W):
        B, N, C = x.shape
        feat = x.transpose(1, 2).view(B, C, H, W)
        return (self.proj(feat) + feat).flatten(2).transpose(1, 2)


class TwinsPCPVT(nn.Module):
    def __init__(self, dims, heads, ratios, depths, srs, num_classes=10):
        super().__init__()
        self.patch_embeds = nn.ModuleList(
            [_TwinsPatchEmbed(4 if i == 0 else 2, 3 if i == 0 else dims[i - 1], d)
             for i, d in enumerate(dims)])
        self.blocks = nn.ModuleList([
            nn.ModuleList([_TwinsBlock(dims[i], heads[i], ratios[i], srs[i])
                           for _ in range(depths[i])]) for i in range(len(dims))])
        self.pos_block = nn.ModuleList([_TwinsPosCNN(d) for d in dims])
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)
        for p in self.parameters():  # non-trivial values everywhere
            nn.init.normal_(p, std=0.2)

    def forward_features(self, x):
        B = x.shape[0]
        for i in range(len(self.blocks)):
            x, (H, W) = self.patch_embeds[i](x)
            for j, blk in enumerate(self.blocks[i]):
                x = blk(x, H, W)
                if j == 0:
                    x = self.pos_block[i](x, H, W)
            if i < len(self.blocks) - 1:
                x = x.reshape(B, H, W, -1).permute(0, 3, 1, 2)
        return self.norm(x).mean(dim=1)

    def forward(self, x):
        return self.head(self.forward_features(x))


SMALL_ARCH = dict(embed_dims=[16, 32, 40, 48], num_heads=[1, 2, 5, 8], mlp_ratios=[8, 8, 4, 4],
                  depths=[2, 1, 2, 1], sr_ratios=[8, 4, 2, 1])


def _twins_small():
    torch.manual_seed(0)
    a = SMALL_ARCH
    return TwinsPCPVT(a['embed_dims'], a['num_heads'], a['mlp_ratios'], a['depths'],
                      a['sr_ratios']).eval()


def test_twins_pcpvt_converts_and_matches_the_official_forward():
    twins = _twins_small()
    state = twins_conv.convert(twins.state_dict())
    assert not any(k.startswith('head') for k in state)
    model = PVTPEG(SMALL_ARCH, drop_path_rate=0.).eval()
    model.load_state_dict(state, strict=True)
    x = torch.rand(2, 3, 64, 96)
    with torch.no_grad():
        ours = model(x)[-1].mean(dim=(2, 3))  # GlobalAveragePooling neck
        ref = twins.forward_features(x)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)


def test_twins_classifier_checkpoint_gives_the_same_logits():
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    import mmpretrain.models  # noqa: F401
    twins = _twins_small()
    state = twins_conv.convert({'model': twins.state_dict()}, with_head=True)
    state = {k if k.startswith('head.') else f'backbone.{k}': v for k, v in state.items()}
    clf = PRETRAIN_MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='mmposenc.PVTPEG', arch=SMALL_ARCH),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=48))).eval()
    clf.load_state_dict(state, strict=True)
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(clf(x, mode='tensor'), twins(x), atol=1e-4, rtol=1e-4)


def test_twins_unmapped_keys_are_listed():
    state = _twins_small().state_dict()
    state['pos_embeds.0'] = torch.zeros(1)
    state['cls_token'] = torch.zeros(1)
    with pytest.raises(KeyError, match=r"2 Twins-PCPVT keys .*\['cls_token', 'pos_embeds.0'\]"):
        twins_conv.convert(state)


def test_twins_full_size_arch_is_inferred_and_loads_strictly():
    keys = {}
    for i, d in enumerate([3, 4, 6, 3]):
        for j in range(d):
            keys[f'stages.{i}.{j}.norm1.weight'] = None
    assert twins_conv.infer_arch(keys) == 'small'
    # a real PVTPEG-small state dict round-trips through the inverse naming
    model = PVTPEG('small')
    inverse = {}
    for k, v in model.state_dict().items():
        k2 = (k.replace('stages.', 'blocks.').replace('ffn.layers.0.0', 'mlp.fc1')
              .replace('ffn.layers.1', 'mlp.fc2').replace('pegs.', 'pos_block.')
              .replace('.projection.', '.proj.'))
        inverse[k2] = v
    inverse['head.weight'] = torch.zeros(1000, 512)
    loaded = twins_conv.load_strict(twins_conv.convert(inverse))
    assert isinstance(loaded, PVTPEG) and loaded.depths == [3, 4, 6, 3]


# --- mmpretrain's PCPVT (the twins-pcpvt-* checkpoints OpenMMLab users download) -----------
MMPRETRAIN_ARCH = dict(SMALL_ARCH, patch_sizes=[4, 2, 2, 2], strides=[4, 2, 2, 2])


def _mmpretrain_pcpvt():
    """mmpretrain's PCPVT as its twins-pcpvt configs build it, with non-trivial weights."""
    from mmpretrain.models.backbones import PCPVT
    torch.manual_seed(0)
    model = PCPVT(MMPRETRAIN_ARCH, out_indices=(0, 1, 2, 3), qkv_bias=True,
                  norm_cfg=dict(type='LN', eps=1e-6),
                  norm_after_stage=[False, False, False, True])
    model.init_weights()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def _mmpretrain_classifier_checkpoint(pcpvt, num_classes=10):
    """What an mmpretrain ImageClassifier checkpoint holds: backbone. keys, head.fc, meta."""
    state = {f'backbone.{k}': v for k, v in pcpvt.state_dict().items()}
    state['head.fc.weight'] = torch.randn(num_classes, SMALL_ARCH['embed_dims'][-1])
    state['head.fc.bias'] = torch.randn(num_classes)
    return {'meta': {'mmpretrain_version': '1.2.0', 'epoch': 300}, 'state_dict': state}


def test_mmpretrain_pcpvt_converts_and_matches_mmpretrain():
    """Converted weights of mmpretrain's PCPVT give its features within 1e-5 relative, at an
    image size that is not a multiple of any stage's stride."""
    ref = _mmpretrain_pcpvt()
    ckpt = _mmpretrain_classifier_checkpoint(ref)
    assert twins_conv.source_format(ckpt) == 'mmpretrain'
    state = twins_conv.convert(ckpt)
    assert 'pegs.0.proj.0.weight' in state and 'norm.weight' in state
    assert not any(k.startswith(('head', 'backbone.', 'position_encodings')) for k in state)
    model = PVTPEG(SMALL_ARCH, out_indices=(0, 1, 2, 3), drop_path_rate=0.).eval()
    model.load_state_dict(state, strict=True)
    x = torch.rand(2, 3, 97, 133)
    with torch.no_grad():
        ours, theirs = model(x), ref(x)
    assert len(ours) == len(theirs) == 4
    for o, r in zip(ours, theirs):
        assert o.shape == r.shape
        assert (o - r).abs().max() <= 1e-5 * r.abs().max(), float((o - r).abs().max())
    # the comparison is not vacuous: a PEG left out changes the features
    state['pegs.2.proj.0.weight'] = torch.zeros_like(state['pegs.2.proj.0.weight'])
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        assert (model(x)[3] - theirs[3]).abs().max() > 1e-3 * theirs[3].abs().max()


def test_mmpretrain_pcpvt_cli_writes_a_safely_loadable_classifier(tmp_path, monkeypatch, capfd):
    """The tool end to end: mmpretrain checkpoint in, a PVTPEG classifier checkpoint out that
    loads with weights_only=True and gives mmpretrain's logits; output stays a few lines."""
    import sys

    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    import mmpretrain.models  # noqa: F401
    from mmposenc.engine import load_local_checkpoint
    pcpvt = _mmpretrain_pcpvt()
    ckpt = _mmpretrain_classifier_checkpoint(pcpvt)
    src, dst = tmp_path / 'twins-pcpvt.pth', tmp_path / 'pvtpeg.pth'
    torch.save(ckpt, src)
    monkeypatch.setattr(sys, 'argv', ['twins_pcpvt_to_pvtpeg.py', str(src), str(dst),
                                      '--classifier'])
    monkeypatch.setattr(twins_conv, 'infer_arch', lambda state: SMALL_ARCH)
    twins_conv.main()
    out, err = capfd.readouterr()
    assert len((out + err).strip().splitlines()) <= 3, out + err
    converted = load_local_checkpoint(str(dst))['state_dict']
    clf = PRETRAIN_MODELS.build(dict(
        type='ImageClassifier', backbone=dict(type='mmposenc.PVTPEG', arch=SMALL_ARCH),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=48))).eval()
    clf.load_state_dict(converted, strict=True)
    x = torch.rand(1, 3, 64, 80)
    with torch.no_grad():
        feat = pcpvt(x)[-1].mean(dim=(2, 3))
        logits = feat @ ckpt['state_dict']['head.fc.weight'].T + ckpt['state_dict']['head.fc.bias']
        torch.testing.assert_close(clf(x, mode='tensor'), logits, atol=1e-4, rtol=1e-4)


DEIT_ARCH = dict(embed_dims=48, num_layers=3, num_heads=3, feedforward_channels=96)


def _deit_tiny_small(**kwargs):
    from mmpretrain.models import VisionTransformer
    torch.manual_seed(0)
    deit = VisionTransformer(
        arch=DEIT_ARCH,
        img_size=64, patch_size=16, **kwargs)
    deit.init_weights()
    for p in deit.parameters():
        p.data.normal_(std=0.2)
    deit.eval()  # mmpretrain's BaseBackbone.train() returns None
    return deit


def test_deit_to_cpvt_with_kept_pe_and_zero_peg_equals_deit():
    """Keeping the PE and zero PEGs, the converted CPVT computes exactly DeiT."""
    deit = _deit_tiny_small()
    backbone, head = deit_conv.convert(deit.state_dict(), keep_pos_embed=True)
    assert not head
    cpvt, state = deit_conv.build_cpvt(backbone, init_peg='zeros', arch=DEIT_ARCH,
                                       peg_positions=(0, 1))
    cpvt.eval()
    x = torch.rand(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(cpvt(x)[0], deit(x)[0], atol=1e-5, rtol=1e-5)
        # at another resolution both resize the PE bicubically
        x = torch.rand(1, 3, 96, 48)
        torch.testing.assert_close(cpvt(x)[0], deit(x)[0], atol=1e-5, rtol=1e-5)


def test_deit_to_cpvt_default_drops_pe_and_loads_strictly():
    deit = _deit_tiny_small()
    sd = {f'backbone.{k}': v for k, v in deit.state_dict().items()}
    sd['head.layers.head.weight'] = torch.zeros(5, 48)
    backbone, head = deit_conv.convert({'state_dict': sd})
    assert 'pos_embed' not in backbone and list(head) == ['head.layers.head.weight']
    cpvt, state = deit_conv.build_cpvt(backbone, init_peg='random', arch=DEIT_ARCH)
    with pytest.raises(ValueError, match='not a DeiT size'):
        deit_conv.build_cpvt(backbone)
    assert not cpvt.with_pos_embed and set(state) == set(cpvt.state_dict())
    assert state['pegs.0.proj.0.weight'].abs().sum() > 0
    torch.testing.assert_close(cpvt.layers[2].attn.qkv.weight, deit.layers[2].attn.qkv.weight)


def test_deit_cli_output_is_readable(tmp_path, monkeypatch, capfd):
    """No per-parameter init-weight INFO (about 600 lines for CPVT-Ti before); the output
    loads with weights_only=True."""
    import sys

    from mmpretrain.models import VisionTransformer

    from mmposenc.engine import load_local_checkpoint
    deit = VisionTransformer(arch=dict(embed_dims=192, num_layers=2, num_heads=3,
                                       feedforward_channels=768), img_size=64, patch_size=16)
    src, dst = tmp_path / 'deit.pth', tmp_path / 'cpvt.pth'
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in deit.state_dict().items()},
                'meta': {'epoch': 1}}, src)
    capfd.readouterr()
    monkeypatch.setattr(sys, 'argv', ['deit_to_cpvt.py', str(src), str(dst)])
    deit_conv.main()
    out, err = capfd.readouterr()
    assert 'init_weights' not in out + err and len((out + err).strip().splitlines()) <= 3, \
        out[:2000]
    assert 'pegs.0.proj.0.weight' in load_local_checkpoint(str(dst))['state_dict']


def test_deit_unmapped_keys_are_listed():
    sd = dict(_deit_tiny_small().state_dict())
    sd['dist_token'] = torch.zeros(1)
    with pytest.raises(KeyError, match=r"1 DeiT keys have no CPVT mapping: \['dist_token'\]"):
        deit_conv.convert(sd)


@pytest.mark.parametrize('backbone_cfg', [
    dict(type='mmposenc.CPVT', arch=dict(embed_dims=48, num_layers=2, num_heads=3,
                                         feedforward_channels=96), out_type='featmap'),
    dict(type='mmposenc.PVTPEG', arch=SMALL_ARCH, out_indices=(0, 1, 2, 3)),
])
def test_classifier_checkpoint_loads_as_pretrained_init_cfg(tmp_path, backbone_cfg):
    """An mmpretrain ImageClassifier checkpoint (keys prefixed ``backbone.``) initialises the
    same backbone in a detector/segmentor config through ``init_cfg`` with ``prefix``."""
    from mmpretrain.registry import MODELS as PRETRAIN_MODELS
    import mmpretrain.models  # noqa: F401
    from mmposenc.registry import MODELS
    torch.manual_seed(1)
    clf_backbone = dict(backbone_cfg, out_indices=(-1,) if 'CPVT' in backbone_cfg['type']
                        else (3,))
    clf = PRETRAIN_MODELS.build(dict(
        type='ImageClassifier', backbone=clf_backbone, neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=4, in_channels=48)))
    for p in clf.parameters():
        p.data.normal_()
    ckpt = tmp_path / 'clf.pth'
    torch.save({'state_dict': clf.state_dict(), 'meta': {}}, ckpt)
    dense = MODELS.build(dict(backbone_cfg, init_cfg=dict(
        type='Pretrained', checkpoint=str(ckpt), prefix='backbone.')))
    dense.init_weights()
    src = clf.backbone.state_dict()
    for k, v in dense.state_dict().items():
        torch.testing.assert_close(v, src[k], msg=k)


config_utils = None


def _config_utils():
    global config_utils
    if config_utils is None:
        path = osp.join(ROOT, 'tests', 'test_configs', 'peg_config_utils.py')
        spec = importlib.util.spec_from_file_location('peg_config_utils', path)
        config_utils = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(config_utils)
    return config_utils


@pytest.mark.parametrize('classifier, dense, overrides, missing, unexpected', [
    ('swin_peg/swin-peg-tiny_16xb64_in1k.py', 'swin_peg/mask-rcnn_swin-peg-t-p4-w7_fpn_1x_coco.py',
     {}, {'norm0', 'norm1', 'norm2'}, set()),
    ('swin_peg/swin-peg-tiny_16xb64_in1k.py', 'swin_peg/fpn_swin-peg-t_8xb4-40k_ade20k-512x512.py',
     {}, {'norm0', 'norm1', 'norm2'}, set()),
    ('cpvt/cpvt-small-gap_4xb256_in1k.py', 'cpvt/fpn_cpvt-s_8xb4-40k_ade20k-512x512.py',
     {}, set(), set()),
    # the one-PEG class-token CPVT-S, with the override its dense configs document
    ('cpvt/cpvt-small_4xb256_in1k.py', 'cpvt/retinanet_cpvt-s_fpn_1x_coco.py',
     dict(peg_positions=(0, )), set(), {'cls_token'}),
    # ... and without it: a non-strict load that leaves PEGs 1-4 at their initialisation
    ('cpvt/cpvt-small_4xb256_in1k.py', 'cpvt/retinanet_cpvt-s_fpn_1x_coco.py',
     {}, {'pegs'}, {'cls_token'}),
], ids=['swin-maskrcnn', 'swin-semfpn', 'cpvt-gap-semfpn', 'cpvt-retinanet',
        'cpvt-retinanet-pegs-missing'])
def test_shipped_classifier_checkpoint_initialises_the_shipped_dense_config(
        tmp_path, classifier, dense, overrides, missing, unexpected):
    """A checkpoint of our mmpretrain classifier config initialises the backbone of our
    detector / segmentor config through ``init_cfg=dict(type='Pretrained', prefix='backbone.')``:
    every shared weight (PEGs included) is the checkpoint's; only the dense model's extra
    output norms are missing and only the class token is left over."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    utils = _config_utils()
    dense_cfg = Config.fromfile(osp.join(ROOT, 'configs', dense))
    dense_cfg.model.backbone.update(overrides)
    utils.shrink_depth(dense_cfg.model.backbone)
    clf_cfg = Config.fromfile(osp.join(ROOT, 'configs', classifier))
    clf_cfg.model.backbone.arch = dense_cfg.model.backbone.arch  # same shrunken depth

    torch.manual_seed(2)
    init_default_scope(clf_cfg.default_scope)
    clf = utils.host_models(clf_cfg.default_scope).build(clf_cfg.model)
    for p in clf.parameters():
        p.data.normal_()
    ckpt = tmp_path / 'classifier.pth'
    torch.save({'state_dict': clf.state_dict(), 'meta': {}}, ckpt)

    dense_cfg.model.backbone.init_cfg = dict(
        type='Pretrained', checkpoint=str(ckpt), prefix='backbone.')
    init_default_scope(dense_cfg.default_scope)
    model = utils.host_models(dense_cfg.default_scope).build(dense_cfg.model)
    model.init_weights()

    src, dst = clf.backbone.state_dict(), model.backbone.state_dict()
    assert {k.split('.')[0] for k in set(dst) - set(src)} == missing
    if 'pegs' in missing:
        assert {k.split('.')[1] for k in set(dst) - set(src)} == {'1', '2', '3', '4'}
    assert set(src) - set(dst) == unexpected
    shared = sorted(set(src) & set(dst))
    assert any(k.startswith('pegs.') for k in shared)
    for k in shared:
        torch.testing.assert_close(dst[k], src[k], msg=k)
