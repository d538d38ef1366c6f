"""One implementation of what several modules need (issue 21, item 7): the padding-mask dtype
rule, the masked ConvModule, the position-embedding resize and the converters' helpers."""
import ast
import glob
import importlib.util
import os.path as osp

import pytest
import torch
from mmcv.cnn import ConvModule

from conftest import REPO_ROOT
from mmposenc.models.layers import LearnableAbsolutePE, MaskedPEG, MultiLevelMaskedPEG
from mmposenc.models.padding_exact import masked_conv_module
from mmposenc.models.utils.pos_embed import resize_pos_embed
from mmposenc.utils.checkpoint_conversion import UnmappedKeysError

CONVERTERS = sorted(glob.glob(osp.join(REPO_ROOT, 'tools', 'model_converters', '*.py')))


@pytest.mark.parametrize('kind', ['single', 'multi'])
def test_both_pegs_take_the_same_mask_dtypes(kind):
    """A 0/1 mask of any dtype is the bool mask; other values are refused by both PEGs (the
    multi-level one took any dtype, so a float mask of weights became True everywhere)."""
    torch.manual_seed(0)
    if kind == 'single':
        peg, kwargs = MaskedPEG(8).eval(), dict(hw_shape=(3, 4))
    else:
        peg = MultiLevelMaskedPEG(8, num_levels=2).eval()
        kwargs = dict(spatial_shapes=[(3, 4), (2, 2)], level_start_index=[0, 12])
    x = torch.randn(2, 16 if kind == 'multi' else 12, 8)
    mask = torch.zeros(2, x.shape[1], dtype=torch.bool)
    mask[1, 2:4] = True
    ref = peg(x, key_padding_mask=mask, **kwargs)
    for dtype in (torch.uint8, torch.int64, torch.float32):
        assert torch.equal(peg(x, key_padding_mask=mask.to(dtype), **kwargs), ref)
    with pytest.raises(ValueError, match=r'key_padding_mask must be a bool tensor \(True at '
                       r'padded positions\) or hold only 0 and 1, got dtype torch.float32'):
        peg(x, key_padding_mask=mask.float() * 0.5, **kwargs)


def test_masked_conv_module_is_the_image_alone():
    """The public masked ConvModule (used by MaskedChannelMapper and Mask2Former's pixel
    decoder): each image's valid cells as for the image alone, zeros on the padding."""
    torch.manual_seed(0)
    module = ConvModule(4, 8, 3, padding=1, norm_cfg=dict(type='GN', num_groups=2)).eval()
    alone = torch.randn(1, 4, 5, 6)
    batch = torch.randn(2, 4, 7, 9)
    batch[:1, :, :5, :6] = alone
    mask = torch.ones(2, 7, 9, dtype=torch.bool)
    mask[0, :5, :6] = False
    mask[1] = False
    out, out_mask = masked_conv_module(module, batch, mask)
    torch.testing.assert_close(out[0, :, :5, :6], module(alone)[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(out_mask, mask) and (out[0][:, mask[0]] == 0).all()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_position_embeddings_resize_in_float32(dtype):
    """One resize (CPVT, PVT + PEG and LearnableAbsolutePE): interpolated in float32, returned
    in the embedding's dtype, extra tokens kept."""
    torch.manual_seed(0)
    pe = LearnableAbsolutePE(8, num_extra_tokens=1, grid_size=(4, 4))
    pe.pos_embed.data.normal_()
    ref = resize_pos_embed(pe.pos_embed.data, (4, 4), (7, 5), num_extra_tokens=1)
    pe = pe.to(dtype)
    expected = resize_pos_embed(pe.pos_embed.data.float(), (4, 4), (7, 5),
                                num_extra_tokens=1).to(dtype)
    out = pe.add_to_tokens(torch.zeros(1, 1 + 35, 8, dtype=dtype), (7, 5))
    assert out.dtype == dtype and torch.equal(out, expected)
    assert torch.equal(out[:, 0], pe.pos_embed.data[:, 0])
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=0.05)


def _load(path):
    spec = importlib.util.spec_from_file_location(osp.splitext(osp.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('path', CONVERTERS, ids=osp.basename)
def test_converters_share_unwrap_and_unmapped_keys_error(path):
    """No converter defines its own unwrap or error class; each refuses an unknown key with
    the shared UnmappedKeysError (a KeyError) naming it, wherever the checkpoint keeps its
    weights."""
    tree = ast.parse(open(path, encoding='utf-8').read())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & {'_unwrap', 'unwrap', 'UnmappedKeysError'}, defined
    convert = _load(path).convert
    for wrap in ('state_dict', 'model', 'state_dict_ema', None):
        state = {'not.a.known.key': torch.zeros(1)}
        with pytest.raises(UnmappedKeysError, match=r"1 .* keys have no .* mapping: "
                           r"\['not\.a\.known\.key'\]"):
            convert(state if wrap is None else {wrap: state, 'meta': {}})
