"""model-index.yml and the per-folder metafile.yml files (what mim and mmengine read).

The metafiles are generated from the config folders' README tables by
tools/misc/sync_metafiles.py; these tests check the generated files against the READMEs (byte for
byte, and again by a simpler independent reading), the OpenMMLab schema, the config paths, the
uniqueness of the model names, and that mim and mmengine can read them.
"""
import glob
import importlib.util
import os.path as osp
import re

import pytest
import yaml

from conftest import REPO_ROOT

CONFIGS = osp.join(REPO_ROOT, 'configs')


def _sync_module():
    path = osp.join(REPO_ROOT, 'tools', 'misc', 'sync_metafiles.py')
    spec = importlib.util.spec_from_file_location('sync_metafiles', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sync = _sync_module()


def _load(path):
    with open(path, encoding='utf-8') as f:
        return yaml.safe_load(f)


def _metafiles():
    index = _load(osp.join(REPO_ROOT, 'model-index.yml'))
    return [osp.join(REPO_ROOT, p) for p in index['Import']]


def _models():
    return [(path, m) for path in _metafiles() for m in _load(path)['Models']]


def test_metafiles_are_in_sync_with_readmes():
    """Re-generating from the READMEs changes nothing (else: run the script, see the diff)."""
    try:
        files = sync.render_all(REPO_ROOT)
    except sync.MetafileError as e:
        pytest.fail(f'README tables that cannot become metafiles:\n{e}')
    stale = []
    for rel, content in files.items():
        path = osp.join(REPO_ROOT, rel)
        old = open(path, encoding='utf-8').read() if osp.isfile(path) else None
        if old != content:
            stale.append(rel)
    orphans = sorted(osp.relpath(p, REPO_ROOT)
                     for p in glob.glob(osp.join(CONFIGS, '*', 'metafile.yml'))
                     if osp.relpath(p, REPO_ROOT) not in files)
    assert not stale and not orphans, (
        f'out of date: {stale}, without a README table: {orphans}; run '
        '`python tools/misc/sync_metafiles.py` (`--check` prints the diff)')


def test_model_index_imports_every_metafile():
    index = _load(osp.join(REPO_ROOT, 'model-index.yml'))
    on_disk = sorted(osp.relpath(p, REPO_ROOT)
                     for p in glob.glob(osp.join(CONFIGS, '*', 'metafile.yml')))
    assert sorted(index['Import']) == on_disk and len(on_disk) >= 9


def test_config_paths_exist_and_names_are_unique():
    names = {}
    for path, model in _models():
        folder = osp.basename(osp.dirname(path))
        config = model['Config']
        assert config.startswith(f'configs/{folder}/'), (path, config)
        assert osp.isfile(osp.join(REPO_ROOT, config)), f'{path}: {config} does not exist'
        assert model['Name'] == osp.splitext(osp.basename(config))[0]
        assert model['Name'] not in names, (
            f"model name {model['Name']} in {path} and {names[model['Name']]}")
        names[model['Name']] = path
    assert len(names) >= 60


def test_collections_have_paper_code_readme_architecture():
    for path in _metafiles():
        meta = _load(path)
        collections = {c['Name']: c for c in meta['Collections']}
        for c in collections.values():
            assert c['Paper']['URL'].startswith('https://') and c['Paper']['Title'], path
            assert osp.isfile(osp.join(REPO_ROOT, c['README'])), path
            assert osp.isfile(osp.join(REPO_ROOT, c['Code']['URL'])), path
            assert c['Metadata']['Architecture'] and c['Metadata']['Training Data'], path
        for model in meta['Models']:
            assert model['In Collection'] in collections, (path, model['Name'])
            assert model['Metadata']['Training Data'] in \
                collections[model['In Collection']]['Metadata']['Training Data']
            for result in model.get('Results', []):
                assert set(result) == {'Task', 'Dataset', 'Metrics', 'Source'}, result
                assert result['Dataset'] == model['Metadata']['Training Data']
                assert all(isinstance(v, float) for v in result['Metrics'].values())
            converted = model.get('Converted From')
            if converted:
                assert converted['Weights'].startswith('https://')
                assert osp.isfile(osp.join(REPO_ROOT, converted['Converter'].split()[0]))


def _readme_rows(folder):
    """(header, cells) of every README table row, by a plain reading of the Markdown."""
    lines = open(osp.join(CONFIGS, folder, 'README.md'), encoding='utf-8').read().splitlines()
    rows, header = [], None
    for i, line in enumerate(lines):
        if not line.strip().startswith('|'):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if i + 1 < len(lines) and re.fullmatch(r'[\s|:-]+', lines[i + 1]):
            header = cells
        elif header is not None and not re.fullmatch(r'[\s|:-]+', line):
            rows.append((header, cells))
    return rows


def _size_or_source(header):
    """"Params (paper)", "FLOPs", "Source of the paper number": no result columns."""
    return re.match(r'\s*(#?\s*params|flops|source)', header, re.I) is not None


_PLAIN = re.compile(r'\s*\**(\d+(?:\.\d+)?)\**\s*(?:box|mask)?\s*(?:AP|mIoU|%)?\s*(?:\(.*\))?'
                    r'\s*[*†‡¹²³⁴⁵⁶⁷⁸⁹]*\s*$')


def _plain_numbers(cell):
    """The numbers of a cell that holds only numbers (each maybe bold, with a metric word, a
    parenthesis or a footnote mark), alone or ``/``-separated; [] for any other cell."""
    m = _PLAIN.match(cell)
    if m:
        return [float(m.group(1))]
    parts = [_PLAIN.match(p) for p in cell.split('/')]
    return [float(p.group(1)) for p in parts] if all(parts) else []


def test_readme_tables_agree_with_metafiles():
    """Independent of the generator: every config a README table row links is a model of the
    folder's metafile, and every metafile number is written in that row under a "paper" or
    "reproduced" column."""
    for path in _metafiles():
        folder = osp.basename(osp.dirname(path))
        models = {osp.basename(m['Config']): m for m in _load(path)['Models']}
        rows = _readme_rows(folder)
        linked = set()
        for header, cells in rows:
            for cell in cells:
                for target in re.findall(r'\]\((?:\./)?([^)/\s]+\.py)\)', cell):
                    linked.add(target)
        assert linked == set(models), (folder, sorted(linked ^ set(models)))
        for config, model in models.items():
            row_cells = [dict(zip(h, c)) for h, c in rows
                         if any(f']({config})' in x or f'](./{config})' in x for x in c)]
            written = [cell for row in row_cells for h, cell in row.items()
                       if re.search('paper|reproduced', h, re.I) and not _size_or_source(h)]
            for result in model.get('Results', []):
                for metric, value in result['Metrics'].items():
                    assert any(value in _plain_numbers(cell) for cell in written), (
                        f'{folder}/{config}: {metric} {value} not in the README row {row_cells}')


def test_every_paper_number_of_a_readme_row_reaches_the_metafile():
    """A README cell of plain numbers under a paper column gives results."""
    for path in _metafiles():
        folder = osp.basename(osp.dirname(path))
        models = {osp.basename(m['Config']): m for m in _load(path)['Models']}
        for header, cells in _readme_rows(folder):
            configs = {t for c in cells for t in re.findall(r'\]\((?:\./)?([^)/\s]+\.py)\)', c)}
            for h, cell in zip(header, cells):
                if configs and 'paper' in h.lower() and not _size_or_source(h):
                    # a row may link one config per dataset (x_cifar10.py / x_cifar100.py)
                    got = [v for c in configs for r in models[c].get('Results', [])
                           for v in r['Metrics'].values()]
                    assert all(n in got for n in _plain_numbers(cell)), (
                        folder, configs, h, cell, got)


def test_every_metric_column_of_a_config_row_is_a_result_column():
    """A column whose header names a metric (box AP, mIoU, PQ, ...) and that holds a plain
    number in a row linking a config is a "paper" or "reproduced" column, so its number reaches
    the metafile (a "PQ (mmdet model zoo)" column once kept Mask2Former's PQ out of it)."""
    unread = []
    for path in _metafiles():
        folder = osp.basename(osp.dirname(path))
        for header, cells in _readme_rows(folder):
            if not any(re.search(r'\]\((?:\./)?[^)/\s]+\.py\)', c) for c in cells):
                continue
            for h, cell in zip(header, cells):
                if sync.header_metrics(h) and _plain_numbers(cell) and \
                        sync.column_role(h) not in ('paper', 'reproduced'):
                    unread.append((folder, h, cell))
    assert unread == []


def test_panoptic_pq_reaches_the_metafile():
    meta = _load(osp.join(CONFIGS, 'peg_mask2former', 'metafile.yml'))
    (model, ) = [m for m in meta['Models']
                 if m['Name'] == 'mask2former-sine_r50_8xb2-lsj-50e_coco-panoptic']
    tasks = {r['Task']: r['Metrics'] for r in model['Results']}
    # mmdet 3.3 configs/mask2former/metafile.yml, mask2former_r50_8xb2-lsj-50e_coco-panoptic
    assert tasks == {'Panoptic Segmentation': {'PQ': 52.0}, 'Object Detection': {'box AP': 44.5},
                     'Instance Segmentation': {'mask AP': 41.8}}


# ------------------------------------------------------------------ the parser, on its own -----
README = """# Some method

> [A Paper Title](https://arxiv.org/abs/1234.5678)

## ImageNet-1k

| Config | Params (paper) | top-1 (reproduced here) | Paper top-1 | Source |
| :-- | --: | :-: | --: | :-- |
| [config](./a_4xb256_in1k.py) | 5.7M (6M) | | 72.4 * | Table 2 |
| `b_4xb256_in1k.py` | 13.2M - PE | 70.1 | see paper | - |
| [c](c_4xb256_in1k.py) | 22M | | **80** | Table 2 \\| 3 |
| [c2](c2_4xb256_in1k.py) | | | 81.01 → 81.34 at r = 224 | |

```
| [not a table](d_4xb256_in1k.py) | 1 |
|---|---|
```

## COCO

| Model | Paper box AP / mask AP | Config |
|---|---|---|
| M | 42.7 box / 39.3 mask AP (secondary) | [x](mask-rcnn_e_fpn_1x_coco.py) |
| N | - | [x](retinanet_f_fpn_1x_coco.py) |
| O | 40.0 | [gone](missing_1x_coco.py) |

## CIFAR

| config | paper top-1 CIFAR-10 | paper top-1 CIFAR-100 | reproduced here |
|---|---|---|---|
| [g](g_1xb128_cifar10.py) / [..._cifar100.py](g_1xb128_cifar100.py) | 91.06 (Table 1)¹ | 71.29 | |
| [h](h_1xb128_cifar10.py) | 90.0 | | |

| config | paper top-1 at 160 / 224 / 384 |
|---|---|
| [r](r_4xb256_in1k.py) | 77.78 / **80.90** / 79.90 (Table 3) |
"""
FILES = {'a_4xb256_in1k.py', 'b_4xb256_in1k.py', 'c_4xb256_in1k.py', 'c2_4xb256_in1k.py',
         'd_4xb256_in1k.py', 'r_4xb256_in1k.py',
         'mask-rcnn_e_fpn_1x_coco.py', 'retinanet_f_fpn_1x_coco.py', 'g_1xb128_cifar10.py',
         'g_1xb128_cifar100.py', 'h_1xb128_cifar10.py'}


def test_parser_reads_columns_by_header_and_cells_by_content():
    models, problems = sync.parse_readme('x', README, FILES)
    assert list(models) == [
        'a_4xb256_in1k.py', 'b_4xb256_in1k.py', 'c_4xb256_in1k.py', 'c2_4xb256_in1k.py',
        'mask-rcnn_e_fpn_1x_coco.py', 'retinanet_f_fpn_1x_coco.py', 'g_1xb128_cifar10.py',
        'g_1xb128_cifar100.py', 'h_1xb128_cifar10.py', 'r_4xb256_in1k.py']
    a = models['a_4xb256_in1k.py']
    assert a['metadata'] == {'Training Data': 'ImageNet-1k', 'Parameters': '5.7M'}
    (result, ) = a['results']
    assert result['Metrics'] == {'Top 1 Accuracy': 72.4}
    assert result['Source'] == 'Table 2; README note: *'
    b = models['b_4xb256_in1k.py']  # backticked name; "13.2M - PE" is no plain size
    assert 'Parameters' not in b['metadata']
    (result, ) = b['results']  # "see paper" gives nothing, the reproduced 70.1 a result
    assert result['Metrics'] == {'Top 1 Accuracy': 70.1}
    assert result['Source'].startswith('reproduced here (ImageNet-1k, column')
    # bold numbers count; an escaped pipe stays in its cell (the row keeps its five columns)
    (result, ) = models['c_4xb256_in1k.py']['results']
    assert result['Metrics'] == {'Top 1 Accuracy': 80.0}
    assert result['Source'] == 'Table 2 | 3'
    # a number inside a sentence gives no result
    assert models['c2_4xb256_in1k.py']['results'] == []
    e = models['mask-rcnn_e_fpn_1x_coco.py']['results']
    assert [(r['Task'], r['Metrics']) for r in e] == [
        ('Object Detection', {'box AP': 42.7}), ('Instance Segmentation', {'mask AP': 39.3})]
    assert e[0]['Source'] == 'COCO, column "Paper box AP / mask AP"; README note: box / mask ' \
        'AP (secondary)'
    assert models['retinanet_f_fpn_1x_coco.py']['results'] == []
    # one row, one config per dataset: each column goes to the config of the dataset it names
    g10, g100 = models['g_1xb128_cifar10.py'], models['g_1xb128_cifar100.py']
    assert [(r['Dataset'], r['Metrics']) for r in g10['results'] + g100['results']] == [
        ('CIFAR-10', {'Top 1 Accuracy': 91.06}), ('CIFAR-100', {'Top 1 Accuracy': 71.29})]
    assert g10['results'][0]['Source'].endswith('README note: (Table 1)¹')
    assert [r['Metrics'] for r in models['h_1xb128_cifar10.py']['results']] == [
        {'Top 1 Accuracy': 90.0}]
    # one metric over sub-columns: one result per sub-column, labelled by it
    assert [r['Metrics'] for r in models['r_4xb256_in1k.py']['results']] == [
        {'Top 1 Accuracy (160)': 77.78, 'Top 1 Accuracy (224)': 80.9,
         'Top 1 Accuracy (384)': 79.9}]
    # the fenced block is no table; a link to a file that is not there is a problem
    assert 'd_4xb256_in1k.py' not in models
    line = README.splitlines().index('| O | 40.0 | [gone](missing_1x_coco.py) |') + 1
    assert problems == [f'configs/x/README.md:{line}: links missing_1x_coco.py, which is not a '
                        'file of configs/x']
    assert sync.readme_paper(README) == {'Title': 'A Paper Title',
                                         'URL': 'https://arxiv.org/abs/1234.5678'}


def test_parser_reports_rows_with_several_configs_and_unknown_datasets():
    text = ('| a | b |\n|---|---|\n| [x](a_in1k.py) | [y](b_in1k.py) |\n'
            '| [z](c_foo.py) | 1 |\n')
    _, problems = sync.parse_readme('x', text, {'a_in1k.py', 'b_in1k.py', 'c_foo.py'})
    assert len(problems) == 2
    assert 'several configs of one dataset' in problems[0]
    assert 'cannot tell the dataset' in problems[1]
    text = ('| c | paper top-1 |\n|---|---|\n'
            '| [x](a_cifar10.py) / [y](a_cifar100.py) | 90.1 |\n')
    _, problems = sync.parse_readme('x', text, {'a_cifar10.py', 'a_cifar100.py'})
    assert problems == ['configs/x/README.md:3: column "paper top-1" names no dataset but the '
                        "row links configs of several ['CIFAR-10', 'CIFAR-100']"]


def test_header_without_metric_falls_back_on_the_config_name():
    assert sync.default_metrics('mask-rcnn_x_fpn_1x_coco.py') == ['box AP', 'mask AP']
    assert sync.default_metrics('fpn_x_8xb4-40k_ade20k-512x512.py') == ['mIoU']
    assert sync.default_metrics('x_1xb128-400e_cifar100.py') == ['Top 1 Accuracy']
    assert sync.header_metrics('box AP (paper, Table 4)') == ['box AP']
    assert sync.header_metrics('paper') == []
    assert sync.header_metrics('published PQ (mmdet, paper recipe)') == ['PQ']
    assert sync.header_dataset('paper top-1 CIFAR-100') == 'CIFAR-100'
    assert sync.header_dataset('paper top-1 CIFAR-10') == 'CIFAR-10'
    assert sync.header_dataset('box AP (paper, Table 4)') is None


# ------------------------------------------------------------------ readers: mim, mmengine -----
def test_model_index_passes_model_index_checks_and_mim_lists_every_model():
    from mim.commands.search import convert2df
    from modelindex.load_model_index import load

    index = load(osp.join(REPO_ROOT, 'model-index.yml'))
    # model-index resolves a collection's README against the metafile's folder; OpenMMLab (and
    # we) write it from the repository root like `Config`, checked in the collections test
    readme = re.compile(r'Path to README file configs/\w+/README\.md is not a valid file')
    assert [e for e in index.check(silent=True) if not readme.search(e)] == []
    df = convert2df(index)
    names = sorted(m['Name'] for _, m in _models())
    assert sorted(df.index) == names
    assert set(df['config']) == {m['Config'] for _, m in _models()}


def test_mmengine_reads_the_index_from_the_package():
    """mmengine's own reader of `<package>/.mim/model-index.yml` (run for every `mmposenc::`
    base) loads every metafile and finds each model by its config path."""
    from mmengine.config.utils import _get_cfg_metainfo

    from mmposenc.utils import PACKAGE_DIR

    assert osp.isfile(osp.join(PACKAGE_DIR, '.mim', 'model-index.yml')), (
        'mmposenc/.mim is missing: run `bash tools/setup_env.sh` (setup.py creates it)')
    models = _models()
    for _, model in (models[0], models[len(models) // 2], models[-1]):
        cfg_name = model['Config'].partition('/')[-1]
        assert _get_cfg_metainfo(PACKAGE_DIR, cfg_name)['Name'] == model['Name']
