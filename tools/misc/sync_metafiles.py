"""Generate ``configs/<folder>/metafile.yml`` and ``model-index.yml`` from the config READMEs.

The README of each config folder is the source of truth: every row of a Markdown table that
links a config file of the folder becomes a model of the folder's metafile (OpenMMLab /
model-index schema, what ``mim search`` and mmengine's ``mmposenc::`` loader read):

- ``Name``: the config file's stem (unique over the repository); ``Config``: its path from the
  repository root (``configs/<folder>/<file>.py``, which is also its path under ``.mim/``);
- ``Results``: the numbers of the row's "paper" columns (a column whose header says ``paper``)
  and of its "reproduced here" column, where the cell starts with a number; metric, task and
  dataset come from the column header (``top-1``, ``box AP``, ``mask AP``, ``mIoU``) or else from
  the config name (``_in1k``, ``_coco``, ``_ade20k``, ``_cifar10``; ``mask-rcnn`` = box + mask AP);
  ``Source`` says where the number comes from: the row's "Source" cell where the table has one,
  else the table's heading and column header, plus whatever follows the number in the cell
  (a footnote mark, a parenthesis). Cells such as "see paper", "not found", "-" give no result;
- ``Metadata``: ``Training Data`` (from the config name), ``Parameters`` and ``FLOPs`` where a
  ``Params`` / ``FLOPs`` column holds a plain value such as ``5.7M``.

A row may also link one config per dataset (``x_cifar10.py`` / ``x_cifar100.py``): a result
column whose header names a dataset (``paper top-1 CIFAR-100``) then belongs to the config of
that dataset.

A collection per folder carries the paper (the README's first ``> [Title](URL)`` line, unless
:data:`COLLECTIONS` gives one), the README, our implementation (``Code``) and the architecture;
:data:`CONVERTED` adds ``Converted From`` to the models for which an official checkpoint and one
of our converters exist. Table parsing is by header words and cell contents, not by column
positions, so columns may be reordered, aligned (``:--:``) or padded freely.

Usage::

    python tools/misc/sync_metafiles.py           # rewrite the metafiles and model-index.yml
    python tools/misc/sync_metafiles.py --check   # exit 1 with a diff where they are stale

Both list README problems (a link to a config file that does not exist, a row whose configs
cannot be told apart) on stderr, leave those rows out and exit 2.

The tests (``tests/test_packaging/test_mim_metafiles.py``) run the check, so a README edited
without re-running this script fails the suite with the diff to apply.
"""
import argparse
import difflib
import os
import os.path as osp
import re
import sys
from collections import OrderedDict

import yaml

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CONFIGS = 'configs'
MODEL_INDEX = 'model-index.yml'
METAFILE = 'metafile.yml'
HEADER = ('# Generated from {readme} by tools/misc/sync_metafiles.py; do not edit by hand:\n'
          '# edit the README (or the script\'s COLLECTIONS / CONVERTED) and re-run the script.\n')

#: Per config folder: collection name, our implementation, architecture, and the paper where
#: the README's first quote line does not name it.
COLLECTIONS = {
    'cape': dict(
        name='CAPE', code='mmposenc/models/layers/encodings/cape.py',
        architecture=['CAPE', 'Vision Transformer']),
    'cpvt': dict(
        name='CPVT', code='mmposenc/models/backbones/cpvt.py',
        architecture=['PEG', 'Vision Transformer']),
    'pe_zoo': dict(
        name='PE-Zoo', code='mmposenc/models/backbones/vit_pe.py',
        architecture=['Vision Transformer', 'Position Encoding'],
        # the README's setting ("the SaPE2 setting"); the zoo itself compares many papers
        paper=dict(Title='A 2D Semantic-Aware Position Encoding for Vision Transformers',
                   URL='https://arxiv.org/abs/2505.09466')),
    'peg_conditional_detr': dict(
        name='PEG-Conditional-DETR', code='mmposenc/models/detectors/peg_detr_family.py',
        architecture=['PEG', 'Conditional DETR']),
    'peg_dab_detr': dict(
        name='PEG-DAB-DETR', code='mmposenc/models/detectors/peg_detr_family.py',
        architecture=['PEG', 'DAB-DETR']),
    'peg_deformable_detr': dict(
        name='PEG-Deformable-DETR', code='mmposenc/models/detectors/peg_deformable_detr.py',
        architecture=['PEG', 'Deformable DETR']),
    'peg_detr': dict(
        name='PEG-DETR', code='mmposenc/models/detectors/peg_detr.py',
        architecture=['PEG', 'DETR']),
    'peg_dino': dict(
        name='PEG-DINO', code='mmposenc/models/detectors/peg_detr_family.py',
        architecture=['PEG', 'DINO']),
    'peg_mask2former': dict(
        name='PEG-Mask2Former', code='mmposenc/models/detectors/peg_mask2former.py',
        architecture=['PEG', 'Mask2Former']),
    'pervit': dict(
        name='PerViT', code='mmposenc/models/backbones/pervit.py',
        architecture=['Multi-head Peripheral Attention', 'Peripheral Position Encoding']),
    'pvt_peg': dict(
        name='PVT-PEG', code='mmposenc/models/backbones/pvt_peg.py',
        architecture=['PEG', 'PVT', 'Global Average Pooling']),
    'sape2': dict(
        name='SaPE2', code='mmposenc/models/layers/encodings/sape2.py',
        architecture=['SaPE2', 'Vision Transformer']),
    'swin_peg': dict(
        name='Swin-PEG', code='mmposenc/models/backbones/swin_peg.py',
        architecture=['PEG', 'Swin Transformer', 'Global Average Pooling']),
}


def _converted(weights, code, converter):
    """A model's ``Converted From``: the official checkpoint, its code and our converter."""
    return OrderedDict([('Weights', weights), ('Code', code), ('Converter', converter)])


def _twins(weights):
    return _converted(weights, 'https://github.com/Meituan-AutoML/Twins',
                      'tools/model_converters/twins_pcpvt_to_pvtpeg.py --classifier')


def _pervit(arch):
    return _converted(
        'https://drive.google.com/drive/folders/1VJuZKuflgvZF2lS_6dT6Mx_S5RPZGPjD?usp=sharing',
        'https://github.com/juhongm999/pervit',
        f'tools/model_converters/pervit_official_to_mmposenc.py --arch {arch}')


#: Models whose official checkpoint one of our converters turns into a checkpoint of the config
#: (we host no converted file, so there is no ``Weights`` URL of our own).
CONVERTED = {
    # Twins README: pcpvt_small.pth (Twins-PCPVT-S) and pcpvt_base.pth (Twins-PCPVT-B)
    'pvt-peg-small_8xb128_in1k': _twins(
        'https://drive.google.com/file/d/1TWIx_8M-4y6UOKtbCgm1v-UVQ-_lYe6X/view?usp=sharing'),
    'pvt-peg-medium_8xb128_in1k': _twins(
        'https://drive.google.com/file/d/1BsD3ZRivvPsHoZB1AX-tbirFLtCln8ky/view?usp=sharing'),
    **{f'pervit-{arch}_8xb128_in1k': _pervit(arch) for arch in ('tiny', 'small', 'medium')},
}


#: (regex on a lower-cased column header, metric name), in the order they may appear.
METRICS = [(r'top-?\s?1', 'Top 1 Accuracy'), (r'\bbox ap\b', 'box AP'),
           (r'\bmask ap\b', 'mask AP'), (r'\bmiou\b', 'mIoU'), (r'\bpq\b', 'PQ')]
TASKS = {'Top 1 Accuracy': 'Image Classification', 'box AP': 'Object Detection',
         'mask AP': 'Instance Segmentation', 'mIoU': 'Semantic Segmentation',
         'PQ': 'Panoptic Segmentation'}
#: dataset token of an OpenMMLab config name (``..._coco.py``, ``..._ade20k-512x512.py``)
DATASETS = {'in1k': 'ImageNet-1k', 'cifar10': 'CIFAR-10', 'cifar100': 'CIFAR-100',
            'coco': 'COCO', 'ade20k': 'ADE20K', 'shapes': 'shapes_coco (synthetic)',
            'coco128': 'COCO128'}

#: dataset a column header may name (``paper top-1 CIFAR-100``); CIFAR-100 before CIFAR-10
_HEADER_DATASETS = [(r'cifar-?100', 'CIFAR-100'), (r'cifar-?10(?!\d)', 'CIFAR-10'),
                    (r'imagenet|in1k', 'ImageNet-1k'), (r'ade20k', 'ADE20K'),
                    (r'\bcoco\b', 'COCO')]
_SEPARATOR = re.compile(r'^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$')
_LINK = re.compile(r'\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
_CODE = re.compile(r'`([^`]+)`')
_NUMBER = re.compile(r'^\s*(\d+(?:\.\d+)?)(?![\d.])\s*(.*?)\s*$', re.S)
#: "5.7M", "28.30M (29M)"; not "13.2M - PE"
_PLAIN_SIZE = re.compile(r'^\s*(\d+(?:\.\d+)?\s*[KMGT])(?:\s*\([^)]*\))?\s*$')
_BOLD_NUMBER = re.compile(r'(\*\*|__)(\d+(?:\.\d+)?)\1')
#: what may follow a number in a plain cell: a metric word, a parenthesis, footnote marks
_PLAIN_NOTE = re.compile(r'^(?:(?:box|mask)\s*)?(?:AP|mIoU|%)?\s*(?:\(.*\))?\s*'
                         r'[*†‡§¹²³⁴⁵⁶⁷⁸⁹⁰]*\s*$', re.S)
_EMPTY = {'', '-', '—', '–'}


class MetafileError(ValueError):
    """A README that cannot be turned into a metafile (the message says where and why)."""


# ---------------------------------------------------------------- Markdown tables ---------
def split_row(line):
    """Cells of one Markdown table row (outer pipes optional, ``\\|`` is a literal pipe)."""
    s = line.strip()
    if s.startswith('|'):
        s = s[1:]
    if s.endswith('|') and not s.endswith('\\|'):
        s = s[:-1]
    return [c.strip().replace('\\|', '|') for c in re.split(r'(?<!\\)\|', s)]


def iter_tables(text):
    """Yield ``(heading, header_cells, [(line_number, cells), ...])`` for each Markdown table.

    ``heading`` is the text of the closest ``#`` heading above the table. Fenced code blocks
    are skipped. Rows are padded or cut to the header's width.
    """
    lines = text.splitlines()
    heading, in_code, i = '', False, 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(('```', '~~~')):
            in_code = not in_code
        elif not in_code:
            m = re.match(r'^\s{0,3}#+\s+(.*?)\s*#*\s*$', line)
            if m:
                heading = m.group(1)
            elif ('|' in line and i + 1 < len(lines) and '-' in lines[i + 1]
                  and _SEPARATOR.match(lines[i + 1])):
                header = split_row(line)
                rows, j = [], i + 2
                while j < len(lines) and lines[j].strip() and '|' in lines[j]:
                    cells = split_row(lines[j])
                    cells = (cells + [''] * len(header))[:len(header)]
                    rows.append((j + 1, cells))
                    j += 1
                yield heading, header, rows
                i = j
                continue
        i += 1


def config_refs(cell, folder_files):
    """Config files of this folder that a cell links (``[x](file.py)``, ``[x](./file.py)``) or
    names in backticks (``\\`file.py\\```), and the linked ones that do not exist. Host configs
    (``mmdet::...``) and links into other folders are not ours."""
    found, missing = [], []
    links = [(t, True) for t in _LINK.findall(cell)]
    links += [(c, False) for c in _CODE.findall(cell) if '::' not in c]
    for target, is_link in links:
        target = target.split('#')[0].strip()
        if target.startswith('./'):
            target = target[2:]
        if not target.endswith('.py') or '/' in target:
            continue
        if target in folder_files:
            if target not in found:
                found.append(target)
        elif is_link and target not in missing:
            missing.append(target)
    return found, missing


def column_role(header):
    """'paper', 'reproduced', 'source', 'params', 'flops' or None for a column header."""
    h = header.lower()
    if 'reproduced' in h:
        return 'reproduced'
    if h.startswith('source'):
        return 'source'
    if re.fullmatch(r'#?\s*params?(\s*\(.*\))?', h):  # "Params", "Params (paper)"
        return 'params'
    if re.fullmatch(r'flops(\s*\(.*\))?', h):
        return 'flops'
    if 'paper' in h:
        return 'paper'
    return None


def header_metrics(header):
    """Metric names a column header mentions, in the order it mentions them."""
    h = header.lower()
    hits = []
    for pattern, name in METRICS:
        m = re.search(pattern, h)
        if m:
            hits.append((m.start(), name))
    return [name for _, name in sorted(hits)]


def config_dataset(config):
    """Dataset of an OpenMMLab config name: the token after the last ``_`` up to ``-``."""
    token = osp.splitext(config)[0].rsplit('_', 1)[-1].split('-')[0]
    if token not in DATASETS:
        raise MetafileError(f'{config}: cannot tell the dataset from the name (expected it to end '
                            f'in one of {sorted(DATASETS)}, e.g. "_coco.py")')
    return DATASETS[token]


def default_metrics(config):
    """Metrics of a config's task where the column header names none."""
    dataset = config_dataset(config)
    if dataset in ('ImageNet-1k', 'CIFAR-10', 'CIFAR-100'):
        return ['Top 1 Accuracy']
    if dataset == 'ADE20K':
        return ['mIoU']
    if config.startswith('mask-rcnn'):
        return ['box AP', 'mask AP']
    return ['box AP']


def parse_values(cell, n):
    """``n`` plain numbers of a cell (``/``-separated when ``n > 1``) and their notes, or None.

    A part is plain when the number may be bold (``**80.90**``) and is followed by nothing
    but a metric word (``42.7 box``), a parenthesis (``35.7 (PVT paper, 40k iters)``) and
    footnote marks (``33.7 *``, ``91.06 (Table 1)¹``). Anything else ("see paper",
    "PVT-T + 3.1", "81.01 → 81.34 at r = 224", "-") gives no value: better no result than a
    number taken out of its sentence.
    """
    cell = _BOLD_NUMBER.sub(r'\2', cell)
    parts = [cell] if n == 1 else cell.split('/')
    if len(parts) != n:
        return None
    values, notes = [], []
    for part in parts:
        m = _NUMBER.match(part)
        if not m or not _PLAIN_NOTE.match(m.group(2)):
            return None
        values.append(float(m.group(1)))
        if m.group(2):
            notes.append(m.group(2))
    return values, ' / '.join(notes)


def column_metrics(header, config):
    """Metric names of a result column: those the header names (``box AP / mask AP``), else the
    config's; one metric over ``/``-separated sub-columns (``top-1 at 160 / 224 / 384``) gives
    one metric per sub-column, labelled by its last word (``Top 1 Accuracy (224)``)."""
    metrics = header_metrics(header) or default_metrics(config)
    parts = header.split('/')
    if len(metrics) == 1 and len(parts) > 1:
        labels = [re.findall(r'[\w.+-]+', p)[-1:] for p in parts]
        if all(labels):
            return [f'{metrics[0]} ({label[0]})' for label in labels]
    return metrics


def header_dataset(header):
    """Dataset a column header names (``paper top-1 CIFAR-100``), or None."""
    h = header.lower()
    for pattern, dataset in _HEADER_DATASETS:
        if re.search(pattern, h):
            return dataset
    return None


def parse_readme(folder, text, folder_files):
    """Models of one README and the problems found on the way.

    A row may link one config, or several configs of different datasets (``x_cifar10.py`` /
    ``x_cifar100.py``) whose result columns name their dataset (``paper top-1 CIFAR-100``); a
    column naming another dataset than a config's is not that config's.

    Returns:
        tuple: ``OrderedDict(config -> {'results': [...], 'metadata': {...}})`` in README order,
        and a list of problems (``'configs/<folder>/README.md:<line>: ...'``): a link to a config
        file that does not exist, a config whose name tells no dataset, a row whose configs share
        a dataset or whose filled result column names none of theirs.
    """
    models, problems = OrderedDict(), []
    for heading, header, rows in iter_tables(text):
        roles = [column_role(h) for h in header]
        for line_no, cells in rows:
            configs, missing = [], []
            for cell in cells:
                found, gone = config_refs(cell, folder_files)
                configs += [c for c in found if c not in configs]
                missing += gone
            where = f'{CONFIGS}/{folder}/README.md:{line_no}'
            problems += [f'{where}: links {m}, which is not a file of configs/{folder}'
                         for m in missing]
            datasets = OrderedDict()
            for config in configs:
                try:
                    datasets[config] = config_dataset(config)
                except MetafileError as e:
                    problems.append(f'{where}: {e}')
            if not datasets:
                continue
            if len(set(datasets.values())) < len(datasets):
                problems.append(f'{where}: one row links several configs of one dataset '
                                f'{list(datasets)}; give each its own row')
                continue
            source_cell = next((c for c, r in zip(cells, roles)
                                if r == 'source' and c not in _EMPTY), None)
            for config, dataset in datasets.items():
                entry = models.setdefault(config, dict(results=[], metadata=OrderedDict()))
                entry['metadata']['Training Data'] = dataset
            for h, role, cell in zip(header, roles, cells):
                named = header_dataset(h)
                targets = [c for c, d in datasets.items() if named in (None, d)]
                if named is None and len(datasets) > 1:
                    if role in ('paper', 'reproduced', 'params', 'flops') and \
                            cell not in _EMPTY and _NUMBER.match(cell):
                        problems.append(f'{where}: column "{h}" names no dataset but the row '
                                        f'links configs of several {list(datasets.values())}')
                    continue
                for config in targets:
                    entry = models[config]
                    if role in ('params', 'flops') and _PLAIN_SIZE.match(cell):
                        key = 'Parameters' if role == 'params' else 'FLOPs'
                        entry['metadata'][key] = _PLAIN_SIZE.match(cell).group(1).replace(' ', '')
                    if role not in ('paper', 'reproduced') or cell in _EMPTY:
                        continue
                    metrics = column_metrics(h, config)
                    parsed = parse_values(cell, len(metrics))
                    if parsed is None:
                        continue
                    values, note = parsed
                    column = f'{heading}, column "{h}"' if heading else f'column "{h}"'
                    if role == 'reproduced':
                        source = f'reproduced here ({column})'
                    else:
                        source = source_cell or column
                    if note:
                        source += f'; README note: {note}'
                    by_task = OrderedDict()  # one result per task: box AP / mask AP are two
                    for metric, value in zip(metrics, values):
                        task = TASKS[metric.split(' (')[0]]
                        by_task.setdefault(task, OrderedDict())[metric] = value
                    for task, task_metrics in by_task.items():
                        entry['results'].append(OrderedDict([
                            ('Task', task), ('Dataset', datasets[config]),
                            ('Metrics', task_metrics), ('Source', source)]))
    return models, problems


def readme_paper(text):
    """``{'Title', 'URL'}`` of the README's first ``> [Title](URL)`` quote line, or None."""
    for line in text.splitlines():
        m = re.match(r'^\s*>\s*\[([^\]]+)\]\((https?://[^)\s]+)\)', line)
        if m:
            return OrderedDict([('Title', m.group(1).strip()), ('URL', m.group(2))])
    return None


# ---------------------------------------------------------------- metafiles ---------------
def build_metafile(folder, root=REPO_ROOT):
    """The metafile of ``configs/<folder>`` as an ordered dict (None where no README table
    links a config) and the problems of its README (see :func:`parse_readme`)."""
    folder_dir = osp.join(root, CONFIGS, folder)
    readme = osp.join(folder_dir, 'README.md')
    if not osp.isfile(readme):
        return None, []
    with open(readme, encoding='utf-8') as f:
        text = f.read()
    files = {f for f in os.listdir(folder_dir) if f.endswith('.py')}
    models, problems = parse_readme(folder, text, files)
    if not models:
        return None, problems
    info = COLLECTIONS.get(folder, {})
    name = info.get('name', folder)
    version = _version(root)
    paper = info.get('paper') or readme_paper(text)
    collection = OrderedDict([('Name', name)])
    datasets = sorted({m['metadata']['Training Data'] for m in models.values()})
    meta = OrderedDict([('Training Data', datasets)])
    if info.get('architecture'):
        meta['Architecture'] = list(info['architecture'])
    collection['Metadata'] = meta
    if paper:
        collection['Paper'] = OrderedDict(paper)
    collection['README'] = f'{CONFIGS}/{folder}/README.md'
    if info.get('code'):
        collection['Code'] = OrderedDict([('URL', info['code']), ('Version', f'v{version}')])
    out_models = []
    for config, entry in models.items():
        stem = osp.splitext(config)[0]
        model = OrderedDict([('Name', stem), ('In Collection', name),
                             ('Config', f'{CONFIGS}/{folder}/{config}'),
                             ('Metadata', entry['metadata'])])
        if entry['results']:
            model['Results'] = entry['results']
        if stem in CONVERTED:
            model['Converted From'] = CONVERTED[stem]
        out_models.append(model)
    return OrderedDict([('Collections', [collection]), ('Models', out_models)]), problems


def _version(root):
    ns = {}
    with open(osp.join(root, 'mmposenc', 'version.py')) as f:
        exec(f.read(), ns)
    return ns['__version__']


class _Dumper(yaml.SafeDumper):
    """Block style, sequences indented under their key (the OpenMMLab metafiles' layout)."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


_Dumper.add_representer(
    OrderedDict, lambda d, data: d.represent_mapping('tag:yaml.org,2002:map', data.items()))


def dump(data):
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def render_all(root=REPO_ROOT, strict=True):
    """``{path relative to root: file content}`` of every metafile and of model-index.yml.

    Args:
        root (str): Repository root.
        strict (bool): Raise on README problems; else leave the rows concerned out and return
            the problems too.

    Returns:
        OrderedDict | tuple: The files; with ``strict=False`` also the list of problems.

    Raises:
        MetafileError: ``strict`` and a README has problems (all listed in the message).
    """
    out = OrderedDict()
    imports, problems = [], []
    for folder in sorted(os.listdir(osp.join(root, CONFIGS))):
        if not osp.isdir(osp.join(root, CONFIGS, folder)):
            continue
        meta, folder_problems = build_metafile(folder, root)
        problems += folder_problems
        if meta is None:
            continue
        rel = f'{CONFIGS}/{folder}/{METAFILE}'
        out[rel] = HEADER.format(readme=f'{CONFIGS}/{folder}/README.md') + dump(meta)
        imports.append(rel)
    if problems and strict:
        raise MetafileError('\n'.join(problems))
    out[MODEL_INDEX] = (HEADER.format(readme='configs/*/README.md')
                        + dump(OrderedDict([('Import', imports)])))
    return out if strict else (out, problems)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--check', action='store_true',
                        help='write nothing; exit 1 and print a diff where files are stale')
    parser.add_argument('--root', default=REPO_ROOT, help='repository root')
    args = parser.parse_args(argv)
    files, problems = render_all(args.root, strict=False)
    if problems:
        print('README problems (these rows are left out; fix the READMEs and re-run):\n'
              + '\n'.join(problems), file=sys.stderr)
    stale = []
    for rel, content in files.items():
        path = osp.join(args.root, rel)
        old = open(path, encoding='utf-8').read() if osp.isfile(path) else ''
        if old == content:
            continue
        stale.append(rel)
        if args.check:
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), content.splitlines(True), f'a/{rel}', f'b/{rel}'))
        else:
            with open(path, 'w', encoding='utf-8') as f:
                f.write(content)
            print(f'wrote {rel}')
    # metafiles of folders that no longer produce one
    for folder in sorted(os.listdir(osp.join(args.root, CONFIGS))):
        rel = f'{CONFIGS}/{folder}/{METAFILE}'
        if osp.isfile(osp.join(args.root, rel)) and rel not in files:
            stale.append(rel)
            if args.check:
                print(f'{rel}: no README table links a config of {folder} any more')
            else:
                os.remove(osp.join(args.root, rel))
                print(f'removed {rel}')
    if args.check and stale:
        print(f'\n{len(stale)} file(s) out of date: run python tools/misc/sync_metafiles.py',
              file=sys.stderr)
        return 1
    if not stale:
        print('metafiles and model-index.yml are up to date')
    return 2 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
