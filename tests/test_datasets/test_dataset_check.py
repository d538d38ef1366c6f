"""The dataset check (mmposenc.datasets.dataset_check) on real data with injected defects.

COCO128 and the ADE20K sample are copied into tmp_path as symlinks (the JSON and any defective
file are written there); each defect gives its exact one-line message, naming files by their
full paths (the expected lines below are written relative to the data root, which the tests
prepend). The shipped configs run
the same check when their datasets are built (mmposenc.Checked*): through Runner.from_cfg it
fires before the first iteration, through tools/misc/check_dataset.py it lists the lines.
"""
import copy
import json
import os
import os.path as osp
import sys

import numpy as np
import pytest
from PIL import Image

from conftest import REPO_ROOT

ANN = 'annotations/instances_train2017.json'
SMOKE = osp.join(REPO_ROOT, 'configs/smoke/detr_r18_1xb2-8it_coco128.py')
ADE_CFG = osp.join(REPO_ROOT, 'configs/pvt_peg/fpn_pvt-peg-t_8xb4-40k_ade20k-512x512.py')
INFO_LINE = (f'{ANN}: no "info" key (pycocotools\' loadRes, which CocoMetric calls, copies '
             'it; add "info": {})')


@pytest.fixture(scope='module')
def coco128_json(coco128_root):
    with open(osp.join(coco128_root, ANN)) as f:
        return json.load(f)


def _link_dir(src, dst):
    os.makedirs(dst)
    for name in sorted(os.listdir(src)):
        os.symlink(osp.join(src, name), osp.join(dst, name))


def _coco_copy(tmp_path, coco128_root, data):
    """tmp_path/coco: train2017/ of symlinks to COCO128's images, the JSON ``data``."""
    root = tmp_path / 'coco'
    _link_dir(osp.join(coco128_root, 'train2017'), str(root / 'train2017'))
    (root / 'annotations').mkdir()
    (root / ANN).write_text(json.dumps(data))
    return root


def _coco_dataset(root, **kwargs):
    from mmdet.datasets import CocoDataset
    return CocoDataset(data_root=f'{root}/', ann_file=ANN, data_prefix=dict(img='train2017/'),
                       filter_cfg=dict(filter_empty_gt=True, min_size=32), lazy_init=True,
                       **kwargs)


def _check(dataset, files='none', allow=()):
    from mmposenc.datasets.dataset_check import check_dataset
    return check_dataset(dataset, files=files, allow=allow)


# ------------------------------------------------------------------------ COCO, unit level
def _ann0(d):
    return d['annotations'][0]  # annotation 1774 of image 74 (640x426), category 18 'dog'


def _set_bbox(bbox):
    return lambda d, root: _ann0(d).update(bbox=bbox)


def _dog_count(d):
    return sum(1 for a in d['annotations'] if a['category_id'] == 18)


def _unlink_image(d, root):
    os.unlink(root / 'train2017' / '000000000009.jpg')


def _garbage_image(d, root):
    p = root / 'train2017' / '000000000009.jpg'
    os.unlink(p)
    p.write_bytes(b'this is not a JPEG' * 20)


def _truncated_image(d, root):
    p = root / 'train2017' / '000000000009.jpg'
    data = p.read_bytes()
    os.unlink(p)
    p.write_bytes(data[:len(data) // 3])


COCO_CASES = [
    # (id, mutation of the JSON dict / folder, expected error lines, files level)
    ('no-info', lambda d, root: d.pop('info'), [INFO_LINE], 'none'),
    ('no-images', lambda d, root: d.pop('images'),
     [f'{ANN}: no "images" key (no image can be loaded)'], 'none'),
    ('no-categories', lambda d, root: d.pop('categories'),
     [f'{ANN}: no "categories" key (mmdet maps metainfo.classes to category ids through it)'],
     'none'),
    ('no-annotations-key', lambda d, root: d.pop('annotations'),
     [f'{ANN}: no "annotations" key (nothing to train or evaluate on)'], 'none'),
    ('empty-annotations', lambda d, root: d.update(annotations=[]),
     [f'{ANN}: "annotations" is empty (nothing to train on)'], 'none'),
    ('negative-width', _set_bbox([61.87, 276.25, -3, 103.18]),
     [f'{ANN}: annotation id 1774 (image 74): bbox width -3 <= 0'], 'none'),
    ('zero-height', _set_bbox([61.87, 276.25, 296.42, 0]),
     [f'{ANN}: annotation id 1774 (image 74): bbox height 0 <= 0'], 'none'),
    ('outside-image', _set_bbox([700, 10, 20, 20]),
     [f'{ANN}: annotation id 1774 (image 74): bbox [700, 10, 20, 20] lies outside the image '
      '(640x426)'], 'none'),
    ('xyxy-box', _set_bbox([61.87, 276.25, 358.29, 379.43]),
     [f'{ANN}: annotation id 1774 (image 74): bbox [61.87, 276.25, 358.29, 379.43] extends '
      '229.68 px beyond the image (640x426); is it [x1, y1, x2, y2] instead of [x, y, width, '
      'height]?'], 'none'),
    ('zero-area', lambda d, root: _ann0(d).update(area=0),
     [f'{ANN}: annotation id 1774 (image 74): area 0 <= 0 (mmdet drops it; set area to the '
      'mask area or width * height)'], 'none'),
    ('unknown-category', lambda d, root: _ann0(d).update(category_id=999),
     [f'{ANN}: annotation id 1774 (image 74): category_id 999 is not among the categories'],
     'none'),
    ('category-not-in-classes', lambda d, root: d['categories'][16].update(name='puppy'),
     [f"{ANN}: class 'dog' of metainfo.classes is not among the categories",
      f"{ANN}: {{dogs}} of 939 annotations have categories not in metainfo.classes: 18 "
      "'puppy' ({dogs}); add them to metainfo.classes, or allow 'category_not_in_classes' to "
      'train on a subset'], 'none'),
    ('category-order',
     lambda d, root: d['categories'].insert(0, d['categories'].pop(1)),
     [f"{ANN}: categories are in another order than metainfo.classes: label 0 means category "
      "'bicycle' but is named 'person'; list metainfo.classes in the JSON's order"], 'none'),
    ('duplicate-annotation-id',
     lambda d, root: d['annotations'].append(copy.deepcopy(_ann0(d))),
     [f'{ANN}: annotation id 1774 occurs 2 times'], 'none'),
    ('duplicate-image-id',
     lambda d, root: d['images'].append(dict(d['images'][0], file_name='other.jpg')),
     [f'{ANN}: image id 9 occurs 2 times'], 'none'),
    ('duplicate-category-id',
     lambda d, root: d['categories'].append(dict(d['categories'][0], name='people')),
     [f'{ANN}: category id 1 occurs 2 times'], 'none'),
    ('missing-image', _unlink_image,
     ['train2017/000000000009.jpg (image 9): file not found'], 'exists'),
    ('unreadable-image', _garbage_image,
     ['train2017/000000000009.jpg (image 9): unreadable (UnidentifiedImageError: cannot '
      'identify image file)'], 'header'),
    ('truncated-image', _truncated_image,
     ['train2017/000000000009.jpg (image 9): unreadable (OSError: image file is truncated '
      '(1 bytes not processed))'],
     'full'),
]


@pytest.mark.parametrize('mutate, expected, files',
                         [c[1:] for c in COCO_CASES], ids=[c[0] for c in COCO_CASES])
def test_coco_defect_gives_its_line(mutate, expected, files, tmp_path, coco128_root,
                                    coco128_json):
    data = copy.deepcopy(coco128_json)
    dogs = _dog_count(data)
    root = _coco_copy(tmp_path, coco128_root, data)
    mutate(data, root)
    (root / ANN).write_text(json.dumps(data))
    report = _check(_coco_dataset(root), files=files)
    assert report.lines('error') == [f'{root}/' + e.replace('{dogs}', str(dogs))
                                     for e in expected]


def test_truncated_image_is_found_only_by_full_reads(tmp_path, coco128_root, coco128_json):
    root = _coco_copy(tmp_path, coco128_root, coco128_json)
    _truncated_image(None, root)
    assert _check(_coco_dataset(root), files='header').errors == []
    assert len(_check(_coco_dataset(root), files='full').errors) == 1


def test_clean_coco128_passes_and_drops_are_counted(coco128_root):
    report = _check(_coco_dataset(coco128_root), files='full')
    assert report.errors == []
    # what mmdet's filter_data drops (2 COCO128 images have no annotation) is counted
    assert report.lines('drop') == [
        f'{osp.abspath(coco128_root)}/{ANN}: 2 of 128 images without annotations of '
        'metainfo.classes (filter_cfg.filter_empty_gt drops them)']
    # the validation set (test_mode) keeps every image: nothing to count
    assert _check(_coco_dataset(coco128_root, test_mode=True)).findings == []


def test_many_defects_are_a_count_and_the_first_few(tmp_path, coco128_root, coco128_json):
    data = copy.deepcopy(coco128_json)
    for ann in data['annotations'][:12]:
        ann['bbox'][2] = -1
    root = _coco_copy(tmp_path, coco128_root, data)
    report = _check(_coco_dataset(root))
    lines = report.lines('error', max_per_kind=5)
    assert len(report.errors) == 12 and len(lines) == 6
    assert lines[-1] == '... and 7 more of this kind (bbox_size), 12 in all'
    # the error's one line: the first three and a count
    first = [f'{root}/{ANN}: annotation id {a["id"]} (image {a["image_id"]}): bbox width -1 '
             '<= 0' for a in data['annotations'][:3]]
    assert report.one_line() == (f'dataset check of CocoDataset ({root}/{ANN}): 12 '
                                 'problem(s): ' + '; '.join(first) + '; ... and 9 more')


def test_own_categories_with_the_configs_coco_classes(tmp_path, coco128_root, coco128_json):
    """A user's JSON whose category names are not the config's classes (metainfo not set):
    mmdet would drop every annotation and then every image; here it is named."""
    data = copy.deepcopy(coco128_json)
    for cat in data['categories']:
        cat['name'] = f'my_{cat["name"]}'
    root = _coco_copy(tmp_path, coco128_root, data)
    report = _check(_coco_dataset(root))
    lines = report.lines('error', max_per_kind=5)
    assert lines[:5] == [f"{root}/{ANN}: class {c!r} of metainfo.classes is not among the categories"
                         for c in ('person', 'bicycle', 'car', 'motorcycle', 'airplane')]
    assert lines[5] == '... and 75 more of this kind (class_not_in_categories), 80 in all'
    assert lines[-1] == (f'{root}/{ANN}: no annotation belongs to metainfo.classes (are classes set '
                         "to your categories' names?)")


def test_allowed_subset_of_categories_is_a_counted_drop(tmp_path, coco128_root,
                                                          coco128_json):
    """Training on some classes on purpose: allow it, and the dropped annotations are
    counted (mmdet drops them silently)."""
    classes = ('person', 'dog')
    root = _coco_copy(tmp_path, coco128_root, coco128_json)
    ds = _coco_dataset(root, metainfo=dict(classes=classes))
    assert [k for _, k, _ in _check(ds).errors] == ['category_not_in_classes']
    report = _check(ds, allow=('category_not_in_classes', ))
    assert report.errors == []
    n = sum(1 for a in coco128_json['annotations']
            if a['category_id'] not in (1, 18))
    drop = report.lines('drop')[0]
    assert drop.startswith(f'{root}/{ANN}: {n} of 939 annotations have categories not in '
                           "metainfo.classes: ")
    assert 'allow' not in drop[len(f'{root}/{ANN}'):]  # (the tmp folder is named after the test)


def test_missing_image_in_test_mode_and_bad_json(tmp_path, coco128_root, coco128_json):
    """An annotation-less image list (COCO test-dev) is fine for test_mode; a file that is
    not JSON is one line."""
    data = {k: v for k, v in coco128_json.items() if k != 'annotations'}
    root = _coco_copy(tmp_path, coco128_root, data)
    report = _check(_coco_dataset(root, test_mode=True))
    assert report.errors == [] and len(report.lines('note')) == 1
    (root / ANN).write_text('{"images": [')
    lines = _check(_coco_dataset(root)).lines('error')
    assert len(lines) == 1 and lines[0].startswith(
        f'{root}/{ANN}: unreadable (JSONDecodeError: ')


# --------------------------------------------------------------------- ADE20K, unit level
LABEL = 'annotations/ADE_val_00000002.png'
IMAGE = 'images/ADE_val_00000002.jpg'


def _ade_copy(tmp_path, ade20k_sample_root):
    root = tmp_path / 'ade'
    for sub in ('images', 'annotations'):
        _link_dir(osp.join(ade20k_sample_root, 'sampleData', sub), str(root / sub))
    return root


def _ade_dataset(root, **kwargs):
    from mmseg.datasets import ADE20KDataset
    return ADE20KDataset(data_root=str(root), lazy_init=True,
                         data_prefix=dict(img_path='images', seg_map_path='annotations'),
                         **kwargs)


def _write_label(root, fn):
    """Replace the label of image 2 (500x364) by ``fn(label array)``."""
    p = root / LABEL
    arr = np.asarray(Image.open(p))
    os.unlink(p)
    out = fn(arr.copy())
    (out if isinstance(out, Image.Image) else Image.fromarray(out)).save(p)


def _with_value(v):
    def fn(a):
        a[:4, :4] = v
        return a
    return fn


def _garbage(root, rel):
    os.unlink(root / rel)
    (root / rel).write_bytes(b'not an image at all' * 10)


ADE_CASES = [
    ('missing-label', lambda root: os.unlink(root / LABEL),
     [f'{IMAGE}: no label file {LABEL}']),
    ('label-size', lambda root: _write_label(
        root, lambda a: Image.fromarray(a).resize((250, 182), Image.NEAREST)),
     [f'{LABEL}: size 250x182 differs from its image {IMAGE} (500x364)']),
    ('label-values', lambda root: _write_label(root, _with_value(200)),
     [f'{LABEL}: values 200 are not classes (150 classes: 1..150 with '
      'reduce_zero_label=True (0 and 255 ignored))']),
    ('rgb-label', lambda root: _write_label(root, lambda a: np.stack([a] * 3, -1)),
     [f'{LABEL}: a 3-channel (RGB) label; mmseg needs one class index per pixel (a '
      'single-channel or palette PNG)']),
    ('unreadable-label', lambda root: _garbage(root, LABEL),
     [f'{LABEL}: unreadable (UnidentifiedImageError: cannot identify image file)']),
    ('unreadable-image', lambda root: _garbage(root, IMAGE),
     [f'{IMAGE}: unreadable (UnidentifiedImageError: cannot identify image file)']),
]


@pytest.mark.parametrize('mutate, expected', [c[1:] for c in ADE_CASES],
                         ids=[c[0] for c in ADE_CASES])
def test_ade20k_defect_gives_its_line(mutate, expected, tmp_path, ade20k_sample_root):
    root = _ade_copy(tmp_path, ade20k_sample_root)
    mutate(root)
    full = [e.replace(IMAGE, f'{root}/{IMAGE}').replace(LABEL, f'{root}/{LABEL}')
            for e in expected]
    assert _check(_ade_dataset(root), files='header').lines('error') == full


@pytest.mark.parametrize('reduce_zero_label, bad', [(True, '151'), (False, '150, 151')])
def test_ade20k_label_range_follows_reduce_zero_label(reduce_zero_label, bad, tmp_path,
                                                      ade20k_sample_root):
    """150 classes: with reduce_zero_label 0 is ignored and 1..150 are the classes, without
    it 0..149 are; 255 (the ignore index) is fine either way."""
    root = _ade_copy(tmp_path, ade20k_sample_root)

    def fn(a):
        a[0, :4] = [0, 150, 151, 255]
        return a
    _write_label(root, fn)
    lines = _check(_ade_dataset(root, reduce_zero_label=reduce_zero_label),
                   files='header').lines('error')
    assert len(lines) == 1 and lines[0].startswith(f'{root}/{LABEL}: values {bad} are not '
                                                    'classes')


def test_clean_ade20k_sample_passes(ade20k_sample_root):
    from mmseg.datasets import ADE20KDataset
    ds = ADE20KDataset(data_root=osp.join(ade20k_sample_root, 'sampleData'), lazy_init=True,
                       data_prefix=dict(img_path='images', seg_map_path='annotations'))
    assert _check(ds, files='full').findings == []


# ---------------------------------------------------- automatic check through the Runner
# The shipped smoke config through Runner.from_cfg and train() (mmdet's tools/train.py, in a
# fresh process): one error listing a JSON's missing "info" and a negative-width box, before any
# iteration: tests/test_tools/test_train_test_tools.py::
# test_mmdets_own_train_tool_stops_before_training (one of that module's tool processes, forked
# from one interpreter that imported mmdet). A JSON without info and with empty annotations
# through the dataset build the Runner does: test_shipped_coco_config_stops_before_the_first_
# iteration (below).
def test_shipped_ade20k_config_stops_before_the_first_iteration(tmp_path, ade20k_sample_root,
                                                                work_dir):
    from mmengine.config import Config
    from mmengine.runner import Runner

    import mmposenc  # noqa: F401
    from mmposenc.datasets import DatasetCheckError
    root = _ade_copy(tmp_path, ade20k_sample_root)
    os.unlink(root / LABEL)
    cfg = Config.fromfile(ADE_CFG)
    for split in ('train', 'val', 'test'):
        cfg[f'{split}_dataloader'].dataset.data_root = str(root)
        cfg[f'{split}_dataloader'].dataset.data_prefix = dict(
            img_path='images', seg_map_path='annotations')
        cfg[f'{split}_dataloader'].num_workers = 0
        cfg[f'{split}_dataloader'].persistent_workers = False
    cfg.model.backbone.init_cfg = None
    cfg.work_dir = work_dir
    runner = Runner.from_cfg(cfg)
    with pytest.raises(DatasetCheckError) as err:
        runner.train()
    assert str(err.value) == (
        f'dataset check of CheckedADE20KDataset ({root}/images): 1 problem(s): {root}/{IMAGE}: '
        f'no label file {root}/{LABEL} (fix the data; tools/misc/check_dataset.py CONFIG lists '
        'every problem, see its --help)')
    assert isinstance(runner._train_loop, dict)  # the loop was never built: no iteration


def test_checked_dataset_builds_clean_coco128_and_can_be_turned_off(tmp_path, coco128_root,
                                                                     coco128_json):
    from mmengine.registry import DATASETS, init_default_scope
    init_default_scope('mmdet')
    cfg = dict(type='mmposenc.CheckedCocoDataset', data_root=f'{coco128_root}/',
               ann_file=ANN, data_prefix=dict(img='train2017/'),
               filter_cfg=dict(filter_empty_gt=True, min_size=32))
    checked = DATASETS.build(cfg)
    assert len(checked) == 126  # the 2 images without annotations are dropped
    # the JSON parsed by the check and indexed for mmdet: mmdet's own data list, unchanged
    stock = DATASETS.build(dict(cfg, type='CocoDataset'))
    assert np.array_equal(checked.data_bytes, stock.data_bytes)
    assert np.array_equal(checked.data_address, stock.data_address)
    data = copy.deepcopy(coco128_json)
    _ann0(data)['bbox'][2] = -3
    root = _coco_copy(tmp_path, coco128_root, data)
    cfg['data_root'] = f'{root}/'
    with pytest.raises(ValueError, match='bbox width -3 <= 0'):
        DATASETS.build(cfg)
    # check_cfg=False: mmdet's own behaviour (the bad box is dropped without a word)
    assert len(DATASETS.build(dict(cfg, check_cfg=False))) == 126


def test_shipped_coco_config_stops_before_the_first_iteration(tmp_path, coco128_root,
                                                              coco128_json):
    """The shipped smoke config's training dataset built as its Runner builds it before the
    first iteration (DATASETS.build in the config's scope, mmdet's tools/train.py's path):
    empty annotations were numpy's 'need at least one array to concatenate' (mmdet's data
    list emptied by filter_empty_gt), a JSON without info a KeyError after training; now one
    error listing both, raised by the build. (The whole Runner through mmdet's tools/train.py,
    in a fresh process, before any iteration:
    tests/test_tools/test_train_test_tools.py::test_mmdets_own_train_tool_stops_before_training.)
    """
    from mmengine.config import Config
    from mmengine.registry import DATASETS, init_default_scope

    import mmposenc  # noqa: F401
    from mmposenc.datasets import DatasetCheckError
    data = {k: v for k, v in coco128_json.items() if k != 'info'}
    data['annotations'] = []
    root = _coco_copy(tmp_path, coco128_root, data)
    cfg = Config.fromfile(SMOKE)
    dataset = cfg.train_dataloader.dataset
    dataset.data_root = f'{root}/'
    init_default_scope(cfg.default_scope)
    with pytest.raises(DatasetCheckError) as err:
        DATASETS.build(dataset)
    # one line naming the JSON by its full path, then both problems
    assert str(err.value) == (
        f'dataset check of CheckedCocoDataset ({root}/{ANN}): 2 problem(s): {root}/{INFO_LINE}; '
        f'{root}/{ANN}: "annotations" is empty (nothing to train on) (fix the data; '
        'tools/misc/check_dataset.py CONFIG lists every problem, see its --help)')


def test_every_shipped_coco_and_ade20k_dataset_is_checked():
    """No shipped config names a host COCO / ADE20K dataset type itself (the roots set the
    checked ones; children merge into them)."""
    import glob
    import re
    offenders = []
    for path in sorted(glob.glob(osp.join(REPO_ROOT, 'configs', '**', '*.py'),
                                 recursive=True)):
        text = open(path).read()
        if re.search(r"['\"](mmdet\.|mmseg\.)?(CocoDataset|ADE20KDataset)['\"]", text) \
                or re.search(r'_dataloader\s*=\s*dict\(\s*_delete_', text):
            offenders.append(osp.relpath(path, REPO_ROOT))
    assert offenders == []


@pytest.mark.parametrize('path', [SMOKE, ADE_CFG], ids=['coco', 'ade20k'])
def test_shipped_root_configs_use_checked_datasets(path):
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    want = ('mmposenc.CheckedADE20KDataset' if 'ade20k' in path
            else 'mmposenc.CheckedCocoDataset')
    assert [cfg[f'{s}_dataloader'].dataset.type for s in ('train', 'val', 'test')] == [want] * 3


# ------------------------------------------------------------------------------- the tool
def _tool(*args):
    sys.path.insert(0, osp.join(REPO_ROOT, 'tools', 'misc'))
    try:
        import check_dataset
    finally:
        sys.path.pop(0)
    return check_dataset.main(list(args))


def test_tool_lists_the_lines_and_exits_1(tmp_path, coco128_root, coco128_json, capsys):
    data = copy.deepcopy(coco128_json)
    _ann0(data)['bbox'][2] = -3
    root = _coco_copy(tmp_path, coco128_root, data)
    _unlink_image(None, root)
    rc = _tool(SMOKE, '--split', 'train', '--files', 'exists', '--cfg-options',
               f'train_dataloader.dataset.data_root={root}/')
    out = capsys.readouterr().out
    assert rc == 1
    assert f'  {root}/{ANN}: annotation id 1774 (image 74): bbox width -3 <= 0\n' in out
    assert f'  {root}/train2017/000000000009.jpg (image 9): file not found\n' in out


def test_tool_passes_a_user_config_with_an_mmposenc_base(tmp_path, coco128_root, capsys):
    """A user's own config outside the repository, inheriting a shipped config through
    mmposenc::, on the clean COCO128: exit 0, every split checked."""
    user = tmp_path / 'my_detr.py'
    root = coco128_root.rstrip('/') + '/'
    user.write_text(
        "_base_ = 'mmposenc::smoke/detr_r18_1xb2-8it_coco128.py'\n"
        f"_data = dict(data_root={root!r})\n"
        "train_dataloader = dict(dataset=_data)\n"
        "val_dataloader = dict(dataset=_data)\n"
        "test_dataloader = val_dataloader\n")
    rc = _tool(str(user))
    out = capsys.readouterr().out
    assert rc == 0, out
    assert [line.split(' ')[0] for line in out.splitlines() if line.startswith('[')] == [
        '[train]', '[val]', '[test]']
    assert 'CheckedCocoDataset' in out and 'problem' not in out
    # the packaged config itself, named as mmposenc::
    rc = _tool('mmposenc::smoke/detr_r18_1xb2-8it_coco128.py', '--split', 'train',
               '--cfg-options', f'train_dataloader.dataset.data_root={root}')
    assert rc == 0, capsys.readouterr().out

