"""Ties in the DETR family's top-k selections are broken by lower index, alone and batched
(issue 33, item 1).

The shipped configs (narrowed and at half their Resize scale, as in
test_detr_family_batch_exact.py) on a 480 x 640 and a 640 x 426 COCO128 image, alone and as
one padded batch, with ties constructed where each detector selects:

- the ``max_per_img`` cut (every detector): the head's class logits of each odd query are
  made a copy of those of the even query before it, so every score is bit-equal to its twin's
  (sigmoid heads: ``queries x classes`` candidates; DETR's softmax head: queries), with an odd
  ``max_per_img`` so that a pair straddles the cut;
- DINO's query selection: every encoder token's class score made the same, so the 900 queries
  are decided by the tie rule alone.

"The same detections" of an image alone and batched: the same candidates (query, class) in the
same order, scores within ``SCORES`` and boxes within ``BOXES`` pixels; candidates whose scores
are bit-equal are ranked by lower index (in the query selection: by the image's own token
order, row-major per level, which is the same alone and batched). Candidates whose scores
differ by float rounding only are not ties: their order follows the rounded values (float64
makes such near-ties vanishingly unlikely; none occurs here).

Every top-k of the selections goes through :func:`~mmposenc.models.utils.stable_sort.stable_topk`,
recorded here: the recorder checks the rule on every call's own input, and the indices
selected by the cut are compared alone vs batched.
"""
import functools

import pytest
import torch
from detr_exact_harness import REPO, build_model, load_cfg, pack_images, predict

pytest.importorskip('mmdet')

SCORES, BOXES = 1e-5, 1e-2  # float32 rounding of the scores; boxes in pixels
SCALE = (667, 400)  # half the configs' (1333, 800): 400 x 533 and 601 x 400
CONFIGS = {
    'detr': 'peg_detr/detr-peg_r50_16xb2-50e_coco.py',
    'conditional_detr': 'peg_conditional_detr/conditional-detr-peg_r50_8xb2-50e_coco.py',
    'dab_detr': 'peg_dab_detr/dab-detr-peg_r50_8xb2-50e_coco.py',
    'deformable_detr': 'peg_deformable_detr/deformable-detr-peg_r50_16xb2-50e_coco.py',
    'dino': 'peg_dino/dino-4scale-peg_r50_8xb2-12e_coco.py',
}
MAX_PER_IMG = 49  # odd: the twins 48 and 49 straddle the cut


@functools.lru_cache(maxsize=None)
def _built(name, root, dtype):
    cfg = load_cfg(f'{REPO}/configs/{CONFIGS[name]}', tiny=True, scale=SCALE)
    cfg.model.test_cfg.max_per_img = MAX_PER_IMG
    packed = pack_images(cfg, root)
    return build_model(cfg, packed, dtype=dtype), packed


def twin_queries(head, args, out):
    """Forward hook of a DETR-family head: odd queries' class logits := the even's before."""
    cls_scores, *rest = out
    twins = cls_scores.clone()
    twins[..., 1::2, :] = cls_scores[..., 0:cls_scores.shape[-2] // 2 * 2:2, :]
    return (twins, *rest)


def same_encoder_scores(branch, args, scores):
    """Forward hook of DINO's encoder class branch: every token the same scores."""
    return torch.zeros_like(scores)


class Recorder:
    """Stands in for ``stable_topk``: checks the tie rule on each call and keeps
    ``(input, indices)``."""

    def __init__(self, stable_topk):
        self.stable_topk = stable_topk
        self.calls = []

    def __call__(self, input, k, dim=-1, largest=True, sorted=True):
        out = self.stable_topk(input, k, dim=dim, largest=largest, sorted=sorted)
        assert_index_rule(input, out.values, out.indices, dim)
        self.calls.append((input.detach().clone(), out.indices.clone()))
        return out

    def cuts(self):
        """The indices of the ``max_per_img`` cuts (1-D inputs), in call order."""
        return [idx for x, idx in self.calls if x.dim() == 1]


def assert_index_rule(input, values, indices, dim=-1):
    """``indices`` / ``values`` of a descending top-k of ``input`` follow the rule: values
    do not increase, equal values have increasing indices, and every element left out that
    equals the last kept value has a higher index than the kept ones of that value."""
    x = input.movedim(dim, -1).reshape(-1, input.shape[dim])
    v = values.movedim(dim, -1).reshape(x.shape[0], -1)
    i = indices.movedim(dim, -1).reshape(x.shape[0], -1)
    assert torch.equal(x.gather(1, i), v)
    assert (v[:, 1:] <= v[:, :-1]).all()
    tied = v[:, 1:] == v[:, :-1]
    assert (i[:, 1:][tied] > i[:, :-1][tied]).all(), 'equal values out of index order'
    for row, kept in zip(x, i):
        last = row[kept[-1]]
        left_out = torch.ones_like(row, dtype=torch.bool)
        left_out[kept] = False
        same = left_out & (row == last)
        if same.any():
            assert same.nonzero().min() > kept[row[kept] == last].max(), 'a tie at the cut ' \
                'kept a higher index'


@pytest.fixture
def recorder(monkeypatch):
    from mmposenc.models.utils import stable_sort
    rec = Recorder(stable_sort.stable_topk)
    monkeypatch.setattr(stable_sort, 'stable_topk', rec)
    return rec


def compare_in_order(alone, batched):
    """(labels equal in order, largest score difference, largest box difference in px)."""
    same_labels = torch.equal(alone.labels, batched.labels)
    scores = (alone.scores.double() - batched.scores.double()).abs().max().item()
    boxes = (alone.bboxes.double() - batched.bboxes.double()).abs().max().item()
    return same_labels, scores, boxes


def run_alone_and_batched(model, packed, dtype, recorder):
    alone = []
    for p in packed:
        alone.append(predict(model, [p], dtype)[0].pred_instances)
    cuts_alone = recorder.cuts()
    recorder.calls.clear()
    batched = [s.pred_instances for s in predict(model, packed, dtype)]
    return alone, batched, cuts_alone, recorder.cuts()


#: float64 (several CPU minutes per DINO test): marked slow
DTYPES = [torch.float32, pytest.param(torch.float64, marks=pytest.mark.slow)]


@pytest.mark.parametrize('dtype', DTYPES, ids=['float32', 'float64'])
@pytest.mark.parametrize('name', list(CONFIGS))
def test_twins_at_the_cut_keep_the_lower_query_alone_and_batched(name, dtype, coco128_root,
                                                                 recorder):
    model, packed = _built(name, coco128_root, torch.float32)
    model = model.to(dtype)
    handle = model.bbox_head.register_forward_hook(twin_queries)
    try:
        alone, batched, cuts_alone, cuts_batched = run_alone_and_batched(
            model, packed, dtype, recorder)
    finally:
        handle.remove()
        model.float()
    # one cut per image, each over twins: the lower of each kept pair is kept first
    assert len(cuts_alone) == len(cuts_batched) == len(packed)
    for a, b in zip(cuts_alone, cuts_batched):
        assert torch.equal(a, b), 'alone and batched keep other candidates'
        assert len(a) == MAX_PER_IMG
    # the constructed ties are ties of the cut: a twin is left out at the border
    for x, idx in recorder.calls:
        if x.dim() == 1:
            assert (x[idx[-1]] == x).sum() >= 2
    for a, b in zip(alone, batched):
        same_labels, scores, boxes = compare_in_order(a, b)
        assert same_labels and scores <= SCORES and boxes <= BOXES, (scores, boxes)


@pytest.mark.parametrize('dtype', DTYPES, ids=['float32', 'float64'])
def test_dino_query_selection_with_all_tokens_tied(dtype, coco128_root, recorder):
    """All encoder scores equal: the 900 queries are the image's first 900 own tokens, alone
    and batched, and so are its detections."""
    model, packed = _built('dino', coco128_root, torch.float32)
    model = model.to(dtype)
    branch = model.bbox_head.cls_branches[model.decoder.num_layers]
    # before ExactTwoStageMixin's hook, which then scores the padded tokens lowest
    handle = branch.register_forward_hook(same_encoder_scores, prepend=True)
    try:
        alone, batched, _, _ = run_alone_and_batched(model, packed, dtype, recorder)
    finally:
        handle.remove()
        model.float()
    selections = [idx for x, idx in recorder.calls if x.dim() == 2]
    assert len(selections) == 1  # the batch's
    batch_h, batch_w = packed_batch_shape(packed)
    for b, p in enumerate(packed):
        h, w = p['data_samples'].img_shape
        # level 0 (stride 8) of the image holds more than 900 tokens: its first 900 in
        # row-major order, at their places in the padded batch's rows
        own_w, batch_level_w = -(-w // 8), -(-batch_w // 8)
        first = torch.arange(model.num_queries)
        expected = first // own_w * batch_level_w + first % own_w
        assert torch.equal(selections[0][b], expected)
    for a, b in zip(alone, batched):
        same_labels, scores, boxes = compare_in_order(a, b)
        assert same_labels and scores <= SCORES and boxes <= BOXES, (scores, boxes)


def packed_batch_shape(packed):
    return (max(p['data_samples'].img_shape[0] for p in packed),
            max(p['data_samples'].img_shape[1] for p in packed))


def test_dino_differs_alone_and_batched_without_the_rule(coco128_root, monkeypatch):
    """The test above can fail: with ``torch.topk``'s own order of the tied tokens, the
    image's queries alone and batched are other tokens."""
    from mmposenc.models.utils.stable_sort import StableTopk
    monkeypatch.setattr(StableTopk, '__torch_function__',
                        lambda self, func, types, args=(), kwargs=None: func(*args,
                                                                             **(kwargs or {})))
    model, packed = _built('dino', coco128_root, torch.float32)
    branch = model.bbox_head.cls_branches[model.decoder.num_layers]
    handle = branch.register_forward_hook(same_encoder_scores, prepend=True)
    try:
        alone = [predict(model, [p])[0].pred_instances for p in packed]
        batched = [s.pred_instances for s in predict(model, packed)]
    finally:
        handle.remove()
    results = [compare_in_order(a, b) for a, b in zip(alone, batched)]
    assert any(not same or scores > SCORES or boxes > BOXES
               for same, scores, boxes in results), results


@pytest.mark.parametrize('shape, k', [((24000, ), 100), ((2, 20000), 900), ((7, 5), 5)])
def test_stable_topk_breaks_ties_by_lower_index_where_topk_does_not(shape, k):
    from mmposenc.models.utils.stable_sort import StableTopk, stable_topk
    x = torch.randint(0, 3, shape).float()  # a few values, each many times
    dim = len(shape) - 1
    out = stable_topk(x, k, dim=dim)
    assert_index_rule(x, out.values, out.indices, dim)
    ref = torch.topk(x, k, dim=dim)
    assert torch.equal(out.values, ref.values)
    with StableTopk():
        assert torch.equal(x.topk(k, dim).indices, out.indices)
        assert torch.equal(torch.topk(x, k=k, dim=dim).indices, out.indices)
    if shape[-1] > 1000:  # torch's own order is not the index order (its CPU kernel's)
        assert not torch.equal(ref.indices, out.indices)
    with pytest.raises(RuntimeError, match='out of range'):
        stable_topk(x, shape[-1] + 1, dim=dim)
