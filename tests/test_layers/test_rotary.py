"""RoPE-Mixed and the DINOv3-style RoPE against transcriptions of their papers' equations and
official code (written here with complex numbers, independently of the implementation), the
relative-position property, float32 angles under bf16 autocast, and the eval angle cache with
its invalidation rule. (ONNX export: test_rotary_onnx.py; detectors:
tests/test_detectors/test_rotary_encoder_pos.py.)"""
import math

import pytest
import torch

from mmposenc.models.layers import DINOv3RoPE, RoPE2d, RoPEMixed
from mmposenc.models.layers.encodings.rope_mixed import init_mixed_freqs


# ----------------------------------------------------------------- transcriptions
def paper_mixed_freqs(head_dims, num_heads, num_layers, theta, seed):
    """RoPE-Mixed's initialisation as the paper's code draws it: layer by layer, head by head,
    one direction each; magnitudes theta^(-4t/d) for t < d/4; the second half of the pairs
    along the direction turned by pi/2."""
    torch.manual_seed(seed)
    out = torch.zeros(2, num_layers, num_heads, head_dims // 2)
    for layer in range(num_layers):
        for h in range(num_heads):
            a = float(torch.rand(1)) * 2 * math.pi
            for t in range(head_dims // 4):
                m = theta**(-4 * t / head_dims)
                out[0, layer, h, t] = m * math.cos(a)
                out[1, layer, h, t] = m * math.sin(a)
                out[0, layer, h, t + head_dims // 4] = m * math.cos(a + math.pi / 2)
                out[1, layer, h, t + head_dims // 4] = m * math.sin(a + math.pi / 2)
    return out


def paper_mixed_rotate(x, freqs, hw, num_extra):
    """q' = q * exp(i (p_x f_x + p_y f_y)) per head on the complex view of interleaved
    pairs; patch n of an H x W grid at p_x = n mod W, p_y = n div W; extra tokens untouched.
    x: (B, heads, E + H*W, d); freqs: (2, heads, d/2) of one layer."""
    H, W = hw
    n = torch.arange(H * W, dtype=torch.float64)
    px, py = n % W, torch.div(n, W, rounding_mode='floor')
    theta = (px[None, :, None] * freqs[0].double()[:, None, :] +
             py[None, :, None] * freqs[1].double()[:, None, :])  # (heads, N, d/2)
    xc = torch.view_as_complex(x[..., num_extra:, :].double().reshape(
        *x.shape[:-2], H * W, -1, 2).contiguous())
    rotated = torch.view_as_real(xc * torch.polar(torch.ones_like(theta), theta)).flatten(-2)
    return torch.cat((x[..., :num_extra, :].double(), rotated), dim=-2)


def dinov3_rotate(x, hw, base, num_extra, shift=None, jitter=None, rescale=None,
                  dtype=torch.float64):
    """DINOv3's RoPE: cell centres to [-1, 1] per axis ('separate'), then + shift (per axis),
    * jitter (per axis), * rescale; angle 2 pi c / period with period_t = base^(2t / (d/2)),
    rows first then columns, tiled twice; x * cos + rotate_half(x) * sin. Every step in
    ``dtype``, one operation at a time in DINOv3's order (its ``pos_embed_rope_dtype``); the
    patch tokens are cast to ``dtype`` and the result is in ``dtype``."""
    H, W = hw
    d = x.shape[-1]
    ch = torch.arange(0.5, H, dtype=dtype) / H
    cw = torch.arange(0.5, W, dtype=dtype) / W
    c = torch.stack(torch.meshgrid(ch, cw, indexing='ij'), -1).flatten(0, 1)  # (N, 2)
    c = 2.0 * c - 1.0
    if shift is not None:
        c = c + shift.to(dtype)
    if jitter is not None:
        c = c * jitter.to(dtype)
    if rescale is not None:
        c = c * rescale.to(dtype)
    periods = base**(2 * torch.arange(d // 4, dtype=dtype) / (d // 2))
    ang = (2 * math.pi * c[:, :, None] / periods).flatten(1).tile(2)  # (N, d)
    p = x[..., num_extra:, :].to(dtype)
    half = torch.cat((-p[..., d // 2:], p[..., :d // 2]), -1)
    return torch.cat((x[..., :num_extra, :].to(dtype), p * ang.cos() + half * ang.sin()), -2)


def dinov3_draw(shift=None, jitter=None, rescale=None, dtype=torch.float32):
    """One call's draws of DINOv3's RoPE module in training, in its order: shift (2), jitter
    (2), rescale (1), each ``torch.empty(n, dtype).uniform_(...)`` (then ``exp``)."""
    out = {}
    if shift is not None:
        out['shift'] = torch.empty(2, dtype=dtype).uniform_(-shift, shift)
    if jitter is not None:
        out['jitter'] = torch.empty(2, dtype=dtype).uniform_(-math.log(jitter),
                                                             math.log(jitter)).exp()
    if rescale is not None:
        out['rescale'] = torch.empty(1, dtype=dtype).uniform_(-math.log(rescale),
                                                              math.log(rescale)).exp()
    return out


# ------------------------------------------------------------------------ tests
def test_mixed_init_is_the_papers():
    ours = (torch.manual_seed(5), init_mixed_freqs(16, 3, num_layers=2, theta=10.))[1]
    assert torch.allclose(ours, paper_mixed_freqs(16, 3, 2, 10., seed=5), atol=1e-6)
    # and the module draws exactly that at construction
    torch.manual_seed(5)
    rope = RoPEMixed(48, num_heads=3, num_layers=2)
    assert torch.allclose(rope.freqs.detach(), paper_mixed_freqs(16, 3, 2, 10., 5), atol=1e-6)
    assert rope.theta == 10.  # the paper's mixed setting (axial: 100)


@pytest.mark.parametrize('num_extra', [0, 1])
def test_mixed_rotation_is_the_papers(num_extra):
    torch.manual_seed(0)
    rope = RoPEMixed(32, num_heads=2, num_layers=3, num_extra_tokens=num_extra)
    with torch.no_grad():
        rope.freqs.normal_()  # trained-like, every layer different
    q, k = torch.randn(2, 2, num_extra + 12, 16), torch.randn(2, 2, num_extra + 12, 16)
    for layer in range(3):
        q2, k2 = rope.transform_qk(q, k, (3, 4), layer)
        freqs = rope.freqs[:, layer].detach()
        assert torch.allclose(q2.double(), paper_mixed_rotate(q, freqs, (3, 4), num_extra),
                              atol=1e-5)
        assert torch.allclose(k2.double(), paper_mixed_rotate(k, freqs, (3, 4), num_extra),
                              atol=1e-5)
    if num_extra:  # the class token is not rotated
        assert torch.equal(q2[..., 0, :], q[..., 0, :])


def test_mixed_logits_depend_only_on_relative_position():
    """One query and one key vector placed everywhere on a 6 x 7 grid: after rotation the
    logit of (i, j) is a function of p_j - p_i alone, for learnt (non-axial) frequencies."""
    torch.manual_seed(1)
    rope = RoPEMixed(16, num_heads=2, num_layers=1)
    with torch.no_grad():
        rope.freqs.normal_()
    H, W = 6, 7
    q = torch.randn(1, 2, 1, 8).expand(1, 2, H * W, 8)
    k = torch.randn(1, 2, 1, 8).expand(1, 2, H * W, 8)
    q2, k2 = rope.transform_qk(q, k, (H, W), 0)
    logits = (q2 @ k2.transpose(-1, -2)).view(2, H, W, H, W)
    # every pair with offset (dy, dx) gives the same logit per head
    for dy, dx in [(0, 1), (2, -3), (-1, 0), (3, 4)]:
        vals = torch.stack([logits[:, y, x, y + dy, x + dx] for y in range(H) for x in range(W)
                            if 0 <= y + dy < H and 0 <= x + dx < W], -1)
        assert (vals - vals[:, :1]).abs().max() < 1e-4
    # and the logits do depend on the offset (the test above is not vacuous)
    assert not torch.allclose(logits[:, 0, 0, 0, 1], logits[:, 0, 0, 1, 0])


def test_mixed_without_rotation_at_theta_100_is_axial():
    """rotate=False puts the first half of the pairs on x and the second on y: the axial
    RoPE of the paper (RoPE2d) at the same theta."""
    rope = RoPEMixed(32, num_heads=2, num_layers=1, theta=100., rotate=False)
    axial = RoPE2d(32, num_heads=2, theta=100.)
    q = torch.randn(1, 2, 20, 16)
    assert torch.allclose(rope.transform_qk(q, q, (4, 5), 0)[0],
                          axial.transform_qk(q, q, (4, 5), 0)[0], atol=1e-5)


@pytest.mark.parametrize('num_extra', [0, 1])
def test_dinov3_eval_is_dinov3s(num_extra):
    rope = DINOv3RoPE(64, num_heads=2, num_extra_tokens=num_extra).eval()
    q = torch.randn(2, 2, num_extra + 5 * 7, 32)
    got = rope.transform_qk(q, q, (5, 7), 0)[0]
    assert torch.allclose(got.double(), dinov3_rotate(q, (5, 7), 100., num_extra), atol=1e-5)


AUG = dict(shift_coords=0.3, jitter_coords=1.5, rescale_coords=2.)
AUG_DRAW = dict(shift=0.3, jitter=1.5, rescale=2.)


def test_dinov3_training_draws_afresh_in_every_block():
    """DINOv3 calls its RoPE module inside the block loop: in training every layer gets its
    own draw (shift, jitter, rescale in that order, one call's draws after the other); in
    eval every layer gets the same table."""
    rope = DINOv3RoPE(32, num_heads=1, **AUG).train()
    assert rope.train_draw == 'per_block' and rope.draw_per_layer
    q = torch.randn(1, 1, 12, 32)
    torch.manual_seed(7)
    got = [rope.transform_qk(q, q, (3, 4), layer)[0] for layer in range(3)]
    torch.manual_seed(7)
    for layer in range(3):
        ref = dinov3_rotate(q, (3, 4), 100., 0, **dinov3_draw(**AUG_DRAW))
        assert torch.allclose(got[layer].double(), ref, atol=1e-5), layer
    assert not torch.allclose(got[0], got[1], atol=1e-3)
    assert not torch.allclose(got[1], got[2], atol=1e-3)
    rope.eval()
    assert not rope.draw_per_layer
    tables = [rope.transform_qk(q, q, (3, 4), layer)[0] for layer in range(3)]
    assert torch.equal(tables[0], tables[1]) and torch.equal(tables[0], tables[2])
    assert torch.allclose(tables[0].double(), dinov3_rotate(q, (3, 4), 100., 0), atol=1e-5)


def test_dinov3_per_forward_draw_is_shared_by_layers():
    """train_draw='per_forward' (timm's port): one draw per forward, made at layer 0 and
    seen by every later layer; the next forward draws again."""
    rope = DINOv3RoPE(32, num_heads=1, train_draw='per_forward', **AUG).train()
    assert not rope.draw_per_layer
    q = torch.randn(1, 1, 12, 32)
    torch.manual_seed(7)
    got0 = rope.transform_qk(q, q, (3, 4), 0)[0]
    got1 = rope.transform_qk(q, q, (3, 4), 1)[0]
    again = rope.transform_qk(q, q, (3, 4), 0)[0]  # a new forward
    torch.manual_seed(7)
    ref = dinov3_rotate(q, (3, 4), 100., 0, **dinov3_draw(**AUG_DRAW))
    assert torch.allclose(got0.double(), ref, atol=1e-5)
    assert torch.equal(got0, got1)
    assert not torch.allclose(got0, again, atol=1e-3)
    assert not torch.allclose(got0, rope.eval().transform_qk(q, q, (3, 4), 0)[0], atol=1e-3)


@pytest.mark.parametrize('train_draw', ['per_block', 'per_forward'])
def test_dinov3_draws_in_pevit(train_draw):
    """In a PEViT forward (no dropout), the layers' angle tables are DINOv3's draws one
    after the other (per block) or one draw for all (per forward); identical in eval."""
    from mmposenc.models.backbones import PEViT
    arch = dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64)
    vit = PEViT(arch=arch, img_size=16, patch_size=4, pos_encoding=dict(
        type='DINOv3RoPE', train_draw=train_draw, **AUG))
    rope = vit.pos_encodings[0]
    tables = []
    angles = rope.angles

    def record(*args, **kwargs):
        tables.append(angles(*args, **kwargs))
        return tables[-1]

    rope.angles = record
    x = torch.randn(2, 3, 12, 16)
    torch.manual_seed(3)
    vit.train()(x)
    torch.manual_seed(3)
    draws = [dinov3_draw(**AUG_DRAW) for _ in range(3 if train_draw == 'per_block' else 1)]
    assert len(tables) == 3
    q = torch.randn(1, 1, 12, 16)
    for layer, table in enumerate(tables):
        draw = draws[layer if train_draw == 'per_block' else 0]
        assert torch.allclose(rope.rotate(q, table.detach()).double(),
                              dinov3_rotate(q, (3, 4), 100., 0, **draw), atol=1e-5), layer
    if train_draw == 'per_block':
        assert not torch.allclose(tables[0], tables[1]) and not torch.allclose(tables[1],
                                                                               tables[2])
    else:
        assert all(torch.equal(t, tables[0]) for t in tables)
    tables.clear()
    with torch.no_grad():
        vit.eval()(x)
    assert len(tables) == 3 and all(torch.equal(t, tables[0]) for t in tables)


def test_draw_per_layer_is_false_for_deterministic_encodings():
    for rope in (RoPEMixed(32, num_layers=2), RoPE2d(32), DINOv3RoPE(32, rescale_coords=None),
                 DINOv3RoPE(32, train_draw='per_forward')):
        assert not rope.train().draw_per_layer


# -------------------------------------------------------------------- precision
def test_dinov3_bf16_is_dinov3s_bf16_recipe():
    """rope_dtype='bf16' computes the periods, coordinates, draws, angles, sin / cos and the
    rotation in bf16 one operation at a time as DINOv3 does with pos_embed_rope_dtype='bf16':
    bit-identical to the transcription, in eval and with per-block training draws."""
    rope = DINOv3RoPE(128, num_heads=2, num_extra_tokens=1, rope_dtype='bf16', **AUG)
    q = torch.randn(2, 2, 1 + 14 * 14, 64)
    got = rope.eval().transform_qk(q, q, (14, 14), 0)[0]
    assert got.dtype == torch.float32  # cast back to the queries' dtype
    ref = dinov3_rotate(q, (14, 14), 100., 1, dtype=torch.bfloat16).float()
    assert torch.equal(got, ref)
    rope.train()
    torch.manual_seed(11)
    got = [rope.transform_qk(q, q, (14, 14), layer)[0] for layer in range(2)]
    torch.manual_seed(11)
    for layer in range(2):
        draw = dinov3_draw(**AUG_DRAW, dtype=torch.bfloat16)
        ref = dinov3_rotate(q, (14, 14), 100., 1, dtype=torch.bfloat16, **draw).float()
        assert torch.equal(got[layer], ref), layer


#: bf16 RoPE against float32 (docs/user_guides/rotary.md): sin / cos of a 14 x 14 grid at
#: head_dims 128 differ by up to 3.5e-2 in eval (angles up to 2 pi carry bf16's 2^-8 relative
#: rounding) and up to ~7e-2 in training with rescale_coords=2 (angles up to 4 pi)
BF16_TABLE_ERR = dict(eval=4e-2, train=8e-2)


@pytest.mark.parametrize('mode', ['eval', 'train'])
def test_dinov3_bf16_against_float32_within_documented_difference(mode):
    f32 = DINOv3RoPE(128, num_heads=1)
    b16 = DINOv3RoPE(128, num_heads=1, rope_dtype=torch.bfloat16)  # a torch dtype works too
    assert b16.rope_dtype == 'bf16'
    worst = 0.
    for seed in range(10 if mode == 'train' else 1):
        torch.manual_seed(seed)
        a32 = getattr(f32, mode)().angles((14, 14), 0)
        torch.manual_seed(seed)
        a16 = getattr(b16, mode)().angles((14, 14), 0)
        assert a32.dtype == torch.float32 and a16.dtype == torch.bfloat16
        worst = max(worst, (a32.cos() - a16.cos().float()).abs().max().item(),
                    (a32.sin() - a16.sin().float()).abs().max().item())
    assert 4e-3 < worst <= BF16_TABLE_ERR[mode]  # bf16 does act, within the documented bound


def test_rope2d_rotates_bf16_queries_in_float32():
    """RoPE2d rotates bf16 queries in float32 and casts back (RoPE-ViT's recipe): the
    result is the float32 rotation of the same queries, rounded once to bf16."""
    torch.manual_seed(0)
    rope = RoPE2d(64 * 4, num_heads=4, num_extra_tokens=1)
    q = (torch.randn(2, 4, 1 + 32 * 32, 64) * 3).bfloat16()
    got = rope.transform_qk(q, q, (32, 32), 0)[0]
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, rope.transform_qk(q.float(), q.float(), (32, 32), 0)[0].bfloat16())
    # RoPE-ViT: float32 complex product with exp(i angles), cast back
    H = W = 32
    n = torch.arange(H * W, dtype=torch.float64)
    freqs = 100.**(-torch.arange(16, dtype=torch.float64) / 16)
    theta = torch.cat(((n % W)[:, None] * freqs, (n // W)[:, None] * freqs), -1)
    qc = torch.view_as_complex(q[..., 1:, :].float().reshape(2, 4, H * W, 32, 2))
    ref = torch.view_as_real(qc * torch.polar(torch.ones_like(theta), theta).cfloat())
    ref = ref.flatten(-2)
    # one rounding to bf16 (half an ulp, 2^-8 relative) beyond float32 angle rounding; the
    # bf16 products of the former implementation missed this by up to an ulp (0.0625 at 8)
    assert ((got[..., 1:, :].float() - ref).abs() <= 2.**-8 * ref.abs() + 1e-4).all()


def test_dinov3_coordinates_are_each_images_own():
    """In a padded batch each image's valid cells get the coordinates they have alone."""
    rope = DINOv3RoPE(32, num_heads=1).eval()
    valid = torch.tensor([[4, 6], [2, 3]])
    batched = rope.angles((4, 6), 0, valid_hw=valid).view(2, 4, 6, -1)
    alone = rope.angles((2, 3), 0).view(2, 3, -1)
    assert torch.allclose(batched[1, :2, :3], alone, atol=1e-6)
    assert torch.allclose(batched[0], rope.angles((4, 6), 0).view(4, 6, -1))


@pytest.mark.parametrize('cls,kwargs', [(RoPEMixed, dict(num_layers=1)), (DINOv3RoPE, {}),
                                        (RoPE2d, {})])
def test_angles_are_float32_under_bf16_autocast(cls, kwargs):
    """bf16 has 8 mantissa bits: x * f at x ~ 60 computed in bf16 is off by up to ~0.25 rad.
    The angles stay float32 and the rotation of bf16 queries is as exact as the output dtype
    allows, at every grid position."""
    torch.manual_seed(0)
    rope = cls(16, num_heads=1, **kwargs).eval()
    if cls is RoPEMixed:
        with torch.no_grad():
            rope.freqs.fill_(0.9)  # large, as learnt frequencies can become
    hw = (64, 64)
    q = torch.randn(1, 1, hw[0] * hw[1], 16).bfloat16()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        angles = rope.angles(hw, 0)
        rotated = rope.transform_qk(q, q, hw, 0)[0]
    assert angles.dtype == torch.float32
    assert rotated.dtype == torch.bfloat16
    if cls is RoPEMixed:  # float64 references, independent of the implementation
        exact = paper_mixed_rotate(q.float(), rope.freqs[:, 0].detach(), hw, 0)
    elif cls is RoPE2d:  # RoPE-Mixed without rotation at theta 100 is RoPE-Axial
        exact = paper_mixed_rotate(q.float(), RoPEMixed(16, theta=100., rotate=False).freqs[
            :, 0].detach(), hw, 0)
    else:
        exact = dinov3_rotate(q.float(), hw, 100., 0)
    err = (rotated.double() - exact).abs().max()
    assert err < 0.05  # bf16 rounding of values of size ~4; bf16 angles give errors ~1


# ----------------------------------------------------------------------- cache
def _mixed():
    torch.manual_seed(0)
    return RoPEMixed(16, num_heads=2, num_layers=2)


def test_cache_serves_frozen_eval_angles_and_invalidates():
    rope = _mixed().eval()
    with torch.no_grad():
        a = rope.angles((3, 4), 1)
        assert rope.angles((3, 4), 1) is a  # served from the cache
        assert rope.cache_stats == dict(hits=1, misses=1)
        assert rope.angles((3, 4), 0) is not a  # another layer, another entry
        assert rope.angles((4, 3), 1) is not a  # another grid
    # an optimizer step changes the frequencies in place: the cache must not serve old angles
    opt = torch.optim.SGD(rope.parameters(), lr=0.1)
    rope.freqs.grad = torch.ones_like(rope.freqs)
    opt.step()
    with torch.no_grad():
        b = rope.angles((3, 4), 1)
        fresh = rope.angles_of(rope.grid_coords((3, 4)), 1)
    assert b is not a and torch.equal(b, fresh) and not torch.allclose(a, b)
    # load_state_dict copies in place: invalidated too
    other = RoPEMixed(16, num_heads=2, num_layers=2)
    rope.load_state_dict(other.state_dict())
    with torch.no_grad():
        c = rope.angles((3, 4), 1)
    assert torch.equal(c, other.angles_of(other.grid_coords((3, 4)), 1).detach())
    # a dtype / device move empties it
    rope.double()
    assert not rope._angle_cache


def test_cache_is_bypassed_when_angles_need_a_graph_or_a_draw():
    rope = _mixed().train()
    a = rope.angles((3, 4), 0)
    assert a.requires_grad and rope.angles((3, 4), 0) is not a  # learnt: recomputed
    assert not rope._angle_cache
    rope.freqs.requires_grad_(False)  # frozen: cached even in training
    assert rope.angles((3, 4), 0) is rope.angles((3, 4), 0)
    dino = DINOv3RoPE(16, num_heads=2).train()  # augmentation: a new draw each forward
    dino.start_forward()
    assert not dino.cacheable()
    assert dino.eval().cacheable()
    # a padded batch (per-image coordinates) is not cached
    with torch.no_grad():
        dino.angles((3, 4), 0, valid_hw=torch.tensor([[3, 4], [2, 2]]))
    assert not dino._angle_cache


def test_cached_eval_output_equals_uncached():
    """A PEViT in eval: cached angles give bit-identical outputs to a cache-free run."""
    from mmposenc.models.backbones import PEViT
    torch.manual_seed(0)
    arch = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
    vit = PEViT(arch=arch, img_size=16, patch_size=4, pos_encoding=dict(type='RoPEMixed'))
    vit.eval()
    x = torch.randn(2, 3, 20, 24)
    with torch.no_grad():
        first, second = vit(x)[0], vit(x)[0]
        vit.pos_encodings[0].cache_size = 0
        uncached = vit(x)[0]
    assert vit.pos_encodings[0].cache_stats['hits'] == 2  # two layers, second call
    assert torch.equal(first, second) and torch.equal(first, uncached)


def test_errors():
    with pytest.raises(ValueError, match='divisible by 4'):
        RoPEMixed(24, num_heads=4)
    with pytest.raises(ValueError, match='normalize_coords'):
        DINOv3RoPE(32, normalize_coords='diag')
    with pytest.raises(ValueError, match='min_period'):
        DINOv3RoPE(32, base=100., min_period=0.1, max_period=10.)
    with pytest.raises(ValueError, match='>= 1'):
        DINOv3RoPE(32, rescale_coords=0.5)
    with pytest.raises(IndexError, match='layer_idx=2'):
        RoPEMixed(32, num_layers=2).angles((2, 2), 2)


@pytest.mark.parametrize('with_cls_token', [True, False], ids=['cls_token', 'gap'])
@pytest.mark.parametrize('rope', ['RoPEMixed', 'DINOv3RoPE'])
def test_with_peg_in_pevit(rope, with_cls_token):
    """CPVT's PEG and a rotary encoding together in one PEViT (class token or GAP): both act
    (the output differs from PEG alone) and the learnt frequencies get gradients."""
    from mmposenc.models.backbones import PEViT
    arch = dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64)
    kw = dict(arch=arch, img_size=16, patch_size=4, with_cls_token=with_cls_token,
              out_type='cls_token' if with_cls_token else 'avg_featmap')
    torch.manual_seed(0)
    both = PEViT(pos_encoding=[dict(type='PEGPositionEncoding'), dict(type=rope)], **kw)
    torch.manual_seed(0)
    peg = PEViT(pos_encoding=[dict(type='PEGPositionEncoding')], **kw)
    peg.load_state_dict(both.state_dict(), strict=False)
    x = torch.randn(2, 3, 20, 24)
    out = both(x)[0]
    assert not torch.allclose(out, peg(x)[0], atol=1e-4)
    out.pow(2).sum().backward()  # (a plain sum of LayerNorm outputs has zero gradient)
    if rope == 'RoPEMixed':
        assert both.pos_encodings[1].freqs.grad.abs().sum() > 0
