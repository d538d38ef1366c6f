"""``masking='paper'``: MaskedPEG computes what CPVT's own detection snippet computes ([E]
supplementary B.2, Algorithm 2 ``PEGDetection``), so the exact masking can be ablated."""
import pytest
import torch
import torch.nn as nn

from mmposenc.models.layers import MaskedPEG, MultiLevelMaskedPEG
from mmposenc.registry import MODELS

C = 8


class Algorithm2(nn.Module):
    """Our transcription of Algorithm 2 (sequence-first tokens (N, B, C), mask (B, N) True at
    padded tokens): depthwise 3x3 conv without bias + BN + ReLU on the whole padded map, added to
    the tokens, padded tokens put back. The snippet's ``cnn_feat`` is read as the reshaped x."""

    def __init__(self, in_chans):
        super().__init__()
        self.proj = nn.Sequential(
            nn.Conv2d(in_chans, in_chans, 3, 1, 1, bias=False, groups=in_chans),
            nn.BatchNorm2d(in_chans), nn.ReLU())

    def forward(self, x, mask, H, W):
        _, B, C = x.shape
        tmp = x.transpose(0, 1)[mask]
        x = x.permute(1, 2, 0).reshape(B, C, H, W)
        x = x + self.proj(x)
        x = x.flatten(2).transpose(1, 2)
        x[mask] = tmp
        return x.transpose(0, 1)


def _batch(seed=0, hw=(6, 7)):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, hw[0] * hw[1], C, generator=g)
    mask = torch.zeros(2, *hw, dtype=torch.bool)
    mask[1, 4:, :] = True
    mask[1, :, 5:] = True  # image 1 is 4 x 5 in a 6 x 7 batch
    return x, mask.flatten(1)


def _paired(train):
    torch.manual_seed(0)
    ours = MaskedPEG(C, masking='paper')
    with torch.no_grad():
        ours.norm.weight.normal_()
        ours.norm.bias.normal_()
    ref = Algorithm2(C)
    ref.proj[0].load_state_dict(ours.proj.state_dict())
    ref.proj[1].load_state_dict(ours.norm.state_dict())
    return ours.train(train), ref.train(train)


@pytest.mark.parametrize('train', [True, False])
def test_paper_mode_equals_algorithm_2(train):
    ours, ref = _paired(train)
    x, mask = _batch()
    out = ours(x, (6, 7), mask)
    expected = ref(x.transpose(0, 1), mask, 6, 7).transpose(0, 1)
    torch.testing.assert_close(out, expected)
    if train:  # the running statistics move the same way (BN over all positions)
        torch.testing.assert_close(ours.norm.running_mean, ref.proj[1].running_mean)
        torch.testing.assert_close(ours.norm.running_var, ref.proj[1].running_var)
    assert torch.equal(out[mask], x[mask])  # padded tokens restored


def test_paper_mode_lets_the_padding_in_and_the_default_does_not():
    """The ablation this option is for: under Algorithm 2 the valid tokens of an image depend on
    what sits in the padding of its batch; with the default masking they do not."""
    x, mask = _batch()
    x2 = x.clone()
    x2[mask] = torch.randn_like(x2[mask]) * 5
    torch.manual_seed(0)
    paper = MaskedPEG(C, masking='paper').eval()
    exact = MaskedPEG(C).eval()
    exact.load_state_dict(paper.state_dict())
    valid = ~mask
    assert not torch.allclose(paper(x, (6, 7), mask)[valid], paper(x2, (6, 7), mask)[valid])
    torch.testing.assert_close(exact(x, (6, 7), mask)[valid], exact(x2, (6, 7), mask)[valid])
    # without padding the two forms are the same function
    torch.testing.assert_close(paper(x, (6, 7)), exact(x, (6, 7)))


def test_multi_level_paper_mode_runs_algorithm_2_per_level():
    torch.manual_seed(0)
    ml = MultiLevelMaskedPEG(C, num_levels=2, masking='paper').eval()
    assert all(peg.masking == 'paper' for peg in ml.pegs)
    x0, m0 = _batch(0, (6, 7))
    x1, m1 = _batch(1, (3, 4))
    out = ml(torch.cat((x0, x1), 1), [(6, 7), (3, 4)], key_padding_mask=torch.cat((m0, m1), 1))
    torch.testing.assert_close(out[:, :42], ml.pegs[0](x0, (6, 7), m0))
    torch.testing.assert_close(out[:, 42:], ml.pegs[1](x1, (3, 4), m1))


def test_config_and_bad_value():
    peg = MODELS.build(dict(type='mmposenc.MultiLevelMaskedPEG', embed_dims=C, masking='paper'))
    assert "masking='paper'" in repr(peg)
    with pytest.raises(ValueError, match=r"masking must be one of \('valid', 'paper'\)"):
        MaskedPEG(C, masking='zeros')
