"""Check a detection or segmentation dataset before training: one line per problem.

mmdet's ``CocoDataset`` and mmseg's ``BaseSegDataset`` accept a broken dataset and fail late or
not at all: a COCO JSON without ``"info"`` trains and then fails in ``CocoMetric``
(pycocotools' ``loadRes`` copies ``dataset['info']``), ``"annotations": []`` ends in numpy's
``need at least one array to concatenate``, boxes of negative width, annotations of categories
outside ``metainfo.classes`` and annotations with ``area`` 0 are dropped without a word, a missing
image or label PNG stops training at the iteration that first loads it, and a label value beyond
the classes reaches the loss. :func:`check_dataset` finds all of these from the dataset's own
settings (the paths, ``metainfo.classes``, ``test_mode``, ``filter_cfg``, ``reduce_zero_label``,
``ignore_index``, ``label_map``) and returns a :class:`CheckReport`: errors, one line each naming
the file (by its full path) and the entry, and what the host will drop on purpose, counted.
:meth:`CheckReport.raise_or_log` raises them as one :class:`DatasetCheckError` whose message is
one line (the first problems and a count; the whole report is logged first when it has more).

It serves both ``tools/misc/check_dataset.py`` (which builds the config's datasets with
``lazy_init=True`` and calls it) and the checked datasets of :mod:`mmposenc.datasets.checked`,
which run it when the dataset is built, before any iteration.

Supported layouts: mmdet's ``CocoDataset`` and its subclasses (COCO instances JSON), mmseg's
``BaseSegDataset`` and its subclasses (an image folder and a label PNG folder, or an
``ann_file`` listing the names, as ADE20K). Other datasets are reported as not checked.
"""
import io
import json
import logging
import os.path as osp
from collections import Counter, OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mmposenc.utils.errors import MMPosEncError

#: ``files`` levels: how much of each image / label file is read.
FILE_LEVELS = ('none', 'exists', 'header', 'full')

#: Error kinds that ``allow`` may turn into counted drops (training on a subset of the
#: categories on purpose; boxes that mmdet clips to the image).
ALLOWABLE = ('category_not_in_classes', 'bbox_beyond_image')

#: A box may extend this many pixels beyond the image before it is reported (float rounding
#: in converted annotations); mmdet's Resize clips what remains.
BBOX_TOLERANCE = 1.0


#: Problems a :class:`DatasetCheckError` names in its one line (the others are counted, and
#: logged in full before it is raised).
ERRORS_IN_MESSAGE = 3


class DatasetCheckError(MMPosEncError, ValueError):
    """A dataset that would fail or be silently mangled; the one-line message names the first
    problems (each with its file's full path) and counts the others."""


class CheckReport:
    """The findings of :func:`check_dataset` for one dataset.

    Args:
        name (str): What was checked, for the header line (dataset type and main file).

    Each finding has a *kind* (``'bbox_size'``, ``'missing_image'``, ...), a severity
    (``'error'``: training would fail or silently use wrong data; ``'drop'``: the host drops the
    entry on purpose; ``'note'``: information) and one line.
    """

    def __init__(self, name):
        self.name = name
        self.findings = []  # (severity, kind, line)
        self.coco_json = None  # the parsed COCO JSON, for a dataset that loads it next

    def add(self, severity, kind, line):
        self.findings.append((severity, kind, line))

    @property
    def errors(self):
        return [f for f in self.findings if f[0] == 'error']

    @property
    def drops(self):
        return [f for f in self.findings if f[0] == 'drop']

    def lines(self, severity, max_per_kind=5):
        """The lines of one severity, at most ``max_per_kind`` of each kind plus a count."""
        by_kind = OrderedDict()
        for sev, kind, line in self.findings:
            if sev == severity:
                by_kind.setdefault(kind, []).append(line)
        out = []
        for kind, lines in by_kind.items():
            out += lines[:max_per_kind]
            if len(lines) > max_per_kind:
                out.append(f'... and {len(lines) - max_per_kind} more of this kind ({kind}), '
                           f'{len(lines)} in all')
        return out

    def one_line(self, max_errors=ERRORS_IN_MESSAGE):
        """The errors on one line: the header, the first ``max_errors`` and a count of the
        others."""
        errors = self.lines('error', max_per_kind=len(self.findings))
        more = (f'; ... and {len(errors) - max_errors} more' if len(errors) > max_errors
                else '')
        return (f'dataset check of {self.name}: {len(errors)} problem(s): '
                + '; '.join(errors[:max_errors]) + more)

    def summary(self, max_per_kind=5):
        """The whole report as text: a header line, then errors, drops and notes."""
        errors = self.lines('error', max_per_kind)
        drops = self.lines('drop', max_per_kind)
        notes = self.lines('note', max_per_kind)
        head = (f'dataset check of {self.name}: {len(self.errors)} problem(s)'
                if self.errors else f'dataset check of {self.name}: OK')
        out = [head] + [f'  {line}' for line in errors]
        if drops:
            out.append('  not used by the dataset (counted, not errors):')
            out += [f'    {line}' for line in drops]
        out += [f'  note: {line}' for line in notes]
        return '\n'.join(out)

    def raise_or_log(self, logger='current'):
        """Raise :class:`DatasetCheckError` on errors (logging the whole report first when
        the error's line cannot name every problem); otherwise log drops and notes."""
        from mmengine.logging import print_log
        if self.errors:
            if len(self.errors) > ERRORS_IN_MESSAGE:
                print_log(self.summary(), logger=logger, level=logging.ERROR)
            raise DatasetCheckError(
                self.one_line() + ' (fix the data; tools/misc/check_dataset.py CONFIG lists '
                'every problem, see its --help)')
        if self.drops or self.lines('note'):
            print_log(self.summary(), logger=logger, level=logging.WARNING)


def check_dataset(dataset, files='header', allow=(), num_threads=8):
    """Check a built (possibly ``lazy_init``) mmdet / mmseg dataset.

    Args:
        dataset (BaseDataset): An mmdet ``CocoDataset`` or mmseg ``BaseSegDataset`` (or
            subclass); only its settings are read, its data list is not needed.
        files (str): How much of each image / label file to read:

            - ``'none'``: nothing (annotations only);
            - ``'exists'``: that the file exists;
            - ``'header'``: that it opens as an image (header only) and its size; label PNGs
              are decoded, since their values can only be checked that way;
            - ``'full'``: images decoded too (finds truncated files).

            Defaults to ``'header'``.
        allow (Sequence[str]): Kinds of :data:`ALLOWABLE` to count as drops instead of
            errors. Defaults to ().
        num_threads (int): Threads reading files. Defaults to 8.

    Returns:
        CheckReport: The findings.
    """
    if files not in FILE_LEVELS:
        raise ValueError(f'files={files!r}; expected one of {FILE_LEVELS}')
    bad = [a for a in allow if a not in ALLOWABLE]
    if bad:
        raise ValueError(f'allow={bad}: only {ALLOWABLE} can be allowed')
    try:
        from mmdet.datasets import CocoDataset, CocoPanopticDataset
    except ImportError:  # mmdet not installed
        CocoDataset = CocoPanopticDataset = ()
    try:
        from mmseg.datasets import BaseSegDataset
    except ImportError:
        BaseSegDataset = ()
    ctx = _Context(dataset, files, allow, num_threads)
    if CocoPanopticDataset and isinstance(dataset, CocoPanopticDataset):
        report = CheckReport(f'{type(dataset).__name__} ({dataset.ann_file})')
        report.add('note', 'unchecked', 'COCO panoptic annotations are not checked')
        return report
    if CocoDataset and isinstance(dataset, CocoDataset):
        return _check_coco(ctx)
    if BaseSegDataset and isinstance(dataset, BaseSegDataset):
        return _check_seg(ctx)
    report = CheckReport(type(dataset).__name__)
    report.add('note', 'unchecked',
               f'{type(dataset).__name__} is not checked (COCO-style mmdet and mmseg '
               'datasets are)')
    return report


class _Context:
    """The dataset's settings, file access and path display shared by the checks."""

    def __init__(self, dataset, files, allow, num_threads):
        self.dataset = dataset
        self.files = files
        self.allow = tuple(allow)
        self.num_threads = num_threads
        self.backend_args = getattr(dataset, 'backend_args', None)

    def show(self, path):
        """``path`` in full: absolute for a local path (a relative data_root is resolved in
        the working directory, as the host resolves it), as given for a URI."""
        if path is None or '://' in str(path):
            return path
        return osp.abspath(path)

    def error(self, report, kind, line):
        report.add('drop' if kind in self.allow else 'error', kind, line)

    def _backend(self, path):
        from mmengine.fileio import get_file_backend
        return get_file_backend(path, backend_args=self.backend_args)

    def is_local(self, path):
        from mmengine.fileio import LocalBackend
        return isinstance(self._backend(path), LocalBackend)

    def exists(self, path):
        if self.is_local(path):
            return osp.isfile(path)
        return self._backend(path).exists(path)

    def open_image(self, path):
        """A PIL image of ``path`` (header read), or raise."""
        from PIL import Image
        if self.is_local(path):
            return Image.open(path)
        return Image.open(io.BytesIO(self._backend(path).get(path)))

    def map_files(self, fn, items):
        """``fn`` over ``items`` with a thread pool (PIL decodes without the GIL)."""
        if len(items) < 16 or self.num_threads <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=self.num_threads) as pool:
            return list(pool.map(fn, items))


def _read_error(err, path=None):
    msg = str(err).splitlines()[0] if str(err) else ''
    if path:  # the line names the file already
        msg = msg.replace(repr(path), '').replace(path, '').rstrip(' :')
    return f'unreadable ({type(err).__name__}: {msg})' if msg else \
        f'unreadable ({type(err).__name__})'


def _check_image_file(ctx, path):
    """None if fine, else (kind, reason); ``(None, size)`` gives the (w, h) read."""
    if ctx.files == 'none':
        return None
    try:
        if not ctx.exists(path):
            return ('missing_image', 'file not found')
    except Exception as err:  # a backend that cannot even stat
        return ('unreadable_image', _read_error(err, path))
    if ctx.files == 'exists':
        return None
    try:
        with ctx.open_image(path) as img:
            if ctx.files == 'full':
                img.load()
            return (None, img.size)
    except Exception as err:
        return ('unreadable_image', _read_error(err, path))


# --------------------------------------------------------------------------- COCO


def _load_json(ctx, path):
    from mmengine.fileio import get_local_path
    with get_local_path(path, backend_args=ctx.backend_args) as local:
        with open(local, 'rb') as f:
            return json.load(f)


def _fmt_num(v):
    return f'{v:g}' if isinstance(v, (int, float)) else repr(v)


def _check_coco(ctx):
    ds = ctx.dataset
    ann_file = ds.ann_file
    name = ctx.show(ann_file)
    report = CheckReport(f'{type(ds).__name__} ({name})')
    try:
        if not ann_file or not ctx.exists(ann_file):
            ctx.error(report, 'missing_ann_file', f'{name}: annotation file not found')
            return report
        data = _load_json(ctx, ann_file)
    except Exception as err:
        ctx.error(report, 'unreadable_ann_file', f'{name}: {_read_error(err, ann_file)}')
        return report
    report.coco_json = data
    if not isinstance(data, dict):
        ctx.error(report, 'not_coco', f'{name}: a JSON {type(data).__name__}, not a COCO '
                  'object with "images", "annotations" and "categories"')
        return report

    # top-level keys
    for key, why in (
            ('info', 'pycocotools\' loadRes, which CocoMetric calls, copies it; '
                     'add "info": {}'),
            ('images', 'no image can be loaded'),
            ('categories', 'mmdet maps metainfo.classes to category ids through it'),
            ('annotations', 'nothing to train or evaluate on')):
        if key not in data:
            if key == 'annotations' and ds.test_mode:
                report.add('note', 'no_annotations',
                           f'{name}: no "annotations" key: only test runs with '
                           'format_only=True can use this file')
            else:
                ctx.error(report, 'missing_key', f'{name}: no "{key}" key ({why})')
    images = data.get('images') or []
    cats = data.get('categories') or []
    anns = data.get('annotations') or []
    if 'images' in data and not images:
        ctx.error(report, 'no_images', f'{name}: "images" is empty')
    if 'annotations' in data and not anns and not ds.test_mode:
        ctx.error(report, 'no_annotations', f'{name}: "annotations" is empty (nothing to '
                  'train on)')
    if 'categories' in data and not cats:
        ctx.error(report, 'no_categories', f'{name}: "categories" is empty')

    # duplicates
    for what, entries in (('image', images), ('annotation', anns), ('category', cats)):
        counts = Counter(e['id'] for e in entries if isinstance(e, dict) and 'id' in e)
        for eid, n in counts.items():
            if n > 1:
                ctx.error(report, 'duplicate_id', f'{name}: {what} id {eid} occurs {n} times')
    by_name = defaultdict(list)
    for c in cats:
        by_name[c.get('name')].append(c.get('id'))
    for cname, ids in by_name.items():
        if len(ids) > 1:
            ctx.error(report, 'duplicate_category_name',
                      f'{name}: category name {cname!r} occurs {len(ids)} times (ids '
                      f'{", ".join(map(str, ids))}); mmdet gives each its own label')

    # categories against metainfo.classes (mmdet: cat_ids = categories whose name is in
    # classes, in the JSON's order; label i = cat_ids[i])
    classes = list(ds.metainfo.get('classes') or ())
    cat_by_id = {c.get('id'): c for c in cats}
    names_json = [c.get('name') for c in cats]
    matched = [n for n in names_json if n in classes]
    if cats and classes:
        missing = [c for c in classes if c not in names_json]
        for c in missing:
            ctx.error(report, 'class_not_in_categories',
                      f'{name}: class {c!r} of metainfo.classes is not among the categories')
        if not missing and len(set(matched)) == len(matched) and matched != [
                c for c in classes if c in matched]:
            order = [c for c in classes if c in matched]
            first = next(i for i, (a, b) in enumerate(zip(matched, order)) if a != b)
            ctx.error(report, 'category_order',
                      f'{name}: categories are in another order than metainfo.classes: '
                      f'label {first} means category {matched[first]!r} but is named '
                      f'{order[first]!r}; list metainfo.classes in the JSON\'s order')
    cat_ids_used = {c.get('id') for c in cats if c.get('name') in classes}

    # annotations
    img_by_id = {i.get('id'): i for i in images if isinstance(i, dict)}
    for i, img in enumerate(images):
        if not isinstance(img, dict):
            continue
        lacking = [k for k in ('id', 'file_name', 'height', 'width') if k not in img]
        if lacking:
            ctx.error(report, 'image_key', f'{name}: image {img.get("id", f"#{i}")}: no '
                      + ', '.join(f'"{k}"' for k in lacking))
    not_in_classes = Counter()
    img_has_class = set()
    tiny = ignored = in_classes = 0
    for i, ann in enumerate(anns):
        if not isinstance(ann, dict):
            ctx.error(report, 'annotation_key', f'{name}: annotation #{i} is a '
                      f'{type(ann).__name__}, not an object')
            continue
        where = f'{name}: annotation id {ann.get("id", f"#{i}")} (image {ann.get("image_id")})'
        lacking = [k for k in ('id', 'image_id', 'category_id', 'bbox', 'area')
                   if k not in ann]
        if lacking:
            ctx.error(report, 'annotation_key',
                      f'{where}: no ' + ', '.join(f'"{k}"' for k in lacking))
            continue
        img = img_by_id.get(ann['image_id'])
        if img is None and img_by_id:  # (no "images" at all is reported once above)
            ctx.error(report, 'unknown_image', f'{where}: image_id {ann["image_id"]} is not '
                      'among the images')
        cid = ann['category_id']
        if not cat_by_id:  # no "categories" at all: reported once above
            pass
        elif cid not in cat_by_id:
            ctx.error(report, 'unknown_category', f'{where}: category_id {cid} is not among '
                      'the categories')
        elif classes and cid not in cat_ids_used:
            not_in_classes[cid] += 1
        else:
            in_classes += 1
            img_has_class.add(ann['image_id'])
        if ann.get('ignore', False):
            ignored += 1
            continue
        bbox = ann['bbox']
        if (not isinstance(bbox, (list, tuple)) or len(bbox) != 4
                or not all(isinstance(v, (int, float)) for v in bbox)):
            ctx.error(report, 'bbox_format', f'{where}: bbox {bbox!r} is not [x, y, width, '
                      'height]')
            continue
        x, y, w, h = bbox
        if w <= 0:
            ctx.error(report, 'bbox_size', f'{where}: bbox width {_fmt_num(w)} <= 0')
        if h <= 0:
            ctx.error(report, 'bbox_size', f'{where}: bbox height {_fmt_num(h)} <= 0')
        if w <= 0 or h <= 0:
            continue
        if not isinstance(ann['area'], (int, float)) or ann['area'] <= 0:
            ctx.error(report, 'area', f'{where}: area {_fmt_num(ann["area"])} <= 0 (mmdet '
                      'drops it; set area to the mask area or width * height)')
        if img is not None and isinstance(img.get('width'), (int, float)) \
                and isinstance(img.get('height'), (int, float)):
            W, H = img['width'], img['height']
            box = f'bbox [{", ".join(_fmt_num(v) for v in bbox)}]'
            if min(x + w, W) - max(x, 0) <= 0 or min(y + h, H) - max(y, 0) <= 0:
                ctx.error(report, 'bbox_outside_image',
                          f'{where}: {box} lies outside the image ({W}x{H})')
                continue
            beyond = max(-x, -y, x + w - W, y + h - H)
            if beyond > BBOX_TOLERANCE:
                ctx.error(report, 'bbox_beyond_image',
                          f'{where}: {box} extends {_fmt_num(round(beyond, 2))} px beyond '
                          f'the image ({W}x{H}); is it [x1, y1, x2, y2] instead of '
                          '[x, y, width, height]?')
        if w < 1 or h < 1:
            tiny += 1
    if not_in_classes:
        listed = ', '.join(f'{cid} {cat_by_id[cid].get("name")!r} ({n})'
                           for cid, n in not_in_classes.most_common(5))
        more = f' and {len(not_in_classes) - 5} more' if len(not_in_classes) > 5 else ''
        total = sum(not_in_classes.values())
        kind = 'category_not_in_classes'
        ctx.error(report, kind,
                  f'{name}: {total} of {len(anns)} annotations have categories not in '
                  f'metainfo.classes: {listed}{more}'
                  + ('' if kind in ctx.allow else
                     '; add them to metainfo.classes, or allow '
                     f'\'{kind}\' to train on a subset'))
        if not in_classes:
            ctx.error(report, 'no_class_annotations',
                      f'{name}: no annotation belongs to metainfo.classes (are classes set '
                      'to your categories\' names?)')
    if tiny:
        report.add('drop', 'bbox_tiny', f'{name}: {tiny} annotation(s) with bbox width or '
                   'height below 1 px (mmdet drops them)')
    if ignored:
        report.add('drop', 'ignore_flag', f'{name}: {ignored} annotation(s) with '
                   '"ignore": true (mmdet drops them)')

    # images mmdet's filter_data drops in training
    if not ds.test_mode and ds.filter_cfg and images and anns:
        if ds.filter_cfg.get('filter_empty_gt', False):
            empty = sum(1 for i in images if isinstance(i, dict)
                        and i.get('id') not in img_has_class)
            if empty:
                report.add('drop', 'image_without_annotations',
                           f'{name}: {empty} of {len(images)} images without annotations of '
                           'metainfo.classes (filter_cfg.filter_empty_gt drops them)')
        min_size = ds.filter_cfg.get('min_size', 0)
        small = sum(1 for i in images if isinstance(i, dict)
                    and min(i.get('width', 0), i.get('height', 0)) < min_size)
        if small:
            report.add('drop', 'image_too_small', f'{name}: {small} images smaller than '
                       f'filter_cfg.min_size={min_size} (dropped)')

    # image files
    prefix = ds.data_prefix.get('img', '') or ''
    todo = [img for img in images if isinstance(img, dict) and 'file_name' in img]
    if ctx.files != 'none' and todo:
        results = ctx.map_files(lambda img: _check_image_file(
            ctx, osp.join(prefix, img['file_name'])), todo)
        for img, res in zip(todo, results):
            if res is None or res[0] is None:
                continue
            kind, reason = res
            ctx.error(report, kind, f'{ctx.show(osp.join(prefix, img["file_name"]))} '
                      f'(image {img.get("id")}): {reason}')
    return report


# --------------------------------------------------------------------------- mmseg


def _seg_pairs(ctx):
    """(image path, label path) pairs as mmseg's ``BaseSegDataset.load_data_list`` builds them."""
    from mmengine import fileio
    ds = ctx.dataset
    img_dir = ds.data_prefix.get('img_path', None)
    ann_dir = ds.data_prefix.get('seg_map_path', None)
    pairs = []
    if ds.ann_file and not osp.isdir(ds.ann_file):  # mmseg: a file of names, else scan
        from mmengine import list_from_file
        for line in list_from_file(ds.ann_file, backend_args=ctx.backend_args):
            name = line.strip()
            pairs.append((osp.join(img_dir, name + ds.img_suffix),
                          None if ann_dir is None else
                          osp.join(ann_dir, name + ds.seg_map_suffix)))
        return pairs
    for img in fileio.list_dir_or_file(dir_path=img_dir, list_dir=False,
                                       suffix=ds.img_suffix, recursive=True,
                                       backend_args=ctx.backend_args):
        seg = img[:-len(ds.img_suffix)] + ds.seg_map_suffix
        pairs.append((osp.join(img_dir, img), None if ann_dir is None else osp.join(ann_dir, seg)))
    return sorted(pairs)


def _valid_label_values(ds):
    """A bool array over raw label values 0..65535: True where the value is a class or ignored."""
    num_classes = len(ds.metainfo.get('classes') or ())
    ignore = getattr(ds, 'ignore_index', 255)
    raw = np.arange(65536)
    mapped = raw.copy()
    if getattr(ds, 'reduce_zero_label', False):  # mmseg's LoadAnnotations
        mapped[raw == 0] = 255
        mapped = mapped - 1
        mapped[mapped == 254] = 255
    label_map = getattr(ds, 'label_map', None)
    if label_map:
        out = mapped.copy()
        for old, new in label_map.items():
            out[mapped == old] = new
        mapped = out
    return (mapped >= 0) & (mapped < num_classes) | (mapped == ignore)


def _describe_valid(ds):
    num_classes = len(ds.metainfo.get('classes') or ())
    ignore = getattr(ds, 'ignore_index', 255)
    if getattr(ds, 'reduce_zero_label', False):
        return (f'{num_classes} classes: 1..{num_classes} with reduce_zero_label=True '
                f'(0 and {ignore} ignored)')
    return f'{num_classes} classes: 0..{num_classes - 1}, {ignore} ignored'


def _check_seg_pair(ctx, img_path, seg_path, valid):
    """Lines (kind, text) for one image / label pair."""
    out = []
    show_img, show_seg = ctx.show(img_path), ctx.show(seg_path) if seg_path else None
    img_res = _check_image_file(ctx, img_path)
    if img_res is not None and img_res[0] is not None:
        out.append((img_res[0], f'{show_img}: {img_res[1]}'))
    if seg_path is None:
        return out
    try:
        if not ctx.exists(seg_path):
            return out + [('missing_label', f'{show_img}: no label file {show_seg}')]
    except Exception as err:
        return out + [('unreadable_label', f'{show_seg}: {_read_error(err, seg_path)}')]
    if ctx.files in ('none', 'exists'):
        return out
    try:
        with ctx.open_image(seg_path) as lab:
            size, mode = lab.size, lab.mode
            arr = np.asarray(lab)
    except Exception as err:
        return out + [('unreadable_label', f'{show_seg}: {_read_error(err, seg_path)}')]
    if arr.ndim == 3 and arr.shape[2] > 1:
        return out + [('label_channels', f'{show_seg}: a {arr.shape[2]}-channel ({mode}) '
                       'label; mmseg needs one class index per pixel (a single-channel or '
                       'palette PNG)')]
    if img_res is not None and img_res[0] is None and img_res[1] != size:
        out.append(('label_size', f'{show_seg}: size {size[0]}x{size[1]} differs from its '
                    f'image {show_img} ({img_res[1][0]}x{img_res[1][1]})'))
    if arr.dtype.kind in 'iu' and arr.size:
        if arr.dtype == np.uint8:
            present = np.nonzero(np.bincount(arr.ravel(), minlength=256))[0]
        else:
            present = np.unique(arr)
        bad = [int(v) for v in present if v < 0 or v >= len(valid) or not valid[v]]
        if bad:
            shown = ', '.join(map(str, bad[:8])) + (' ...' if len(bad) > 8 else '')
            out.append(('label_values', f'{show_seg}: values {shown} are not classes '
                        f'({_describe_valid(ctx.dataset)})'))
    return out


def _check_seg(ctx):
    ds = ctx.dataset
    img_dir = ds.data_prefix.get('img_path', '') or ''
    report = CheckReport(f'{type(ds).__name__} ({ctx.show(img_dir)})')
    if ds.ann_file and not osp.isdir(ds.ann_file) and not osp.isfile(ds.ann_file):
        ctx.error(report, 'missing_ann_file',
                  f'{ctx.show(ds.ann_file)}: ann_file not found (mmseg reads the image '
                  'names from it; leave it \'\' to use every image of img_path)')
        return report
    try:
        pairs = _seg_pairs(ctx)
    except Exception as err:
        ctx.error(report, 'missing_image_dir', f'{ctx.show(img_dir)}: {_read_error(err)}')
        return report
    if not pairs:
        ctx.error(report, 'no_images', f'{ctx.show(img_dir) or "."}: no \'*{ds.img_suffix}\' '
                  'images found')
        return report
    if ds.data_prefix.get('seg_map_path', None) is None:
        report.add('note', 'no_labels', 'data_prefix.seg_map_path is not set: images only')
    valid = _valid_label_values(ds)
    results = ctx.map_files(lambda p: _check_seg_pair(ctx, p[0], p[1], valid), pairs)
    for lines in results:
        for kind, line in lines:
            ctx.error(report, kind, line)
    return report
