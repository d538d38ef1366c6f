"""Pages of the documentation site that are generated from the repository at build time.

Plain Python (no Sphinx import), so that the tests can call the same functions as the build:

- :func:`model_zoo_markdown`: the model zoo, from ``model-index.yml`` and the
  ``configs/*/metafile.yml`` files it imports (every config, its task, the paper's number and
  table, and whether it has been reproduced here);
- :func:`api_entries` / :func:`api_markdown`: the API reference, one autodoc entry per public
  name of each package and per class of mmposenc's registries (a registered class missing from
  the list is an error);
- :func:`config_readme_markdown`: a config folder's README with its links rewritten for the site;
- :func:`test_refs` / :func:`test_page_markdown`: the pages that show the tests the other pages
  cite with ``{test}`path::name```.
"""
import importlib
import inspect
import os.path as osp
import re
from collections import OrderedDict

import yaml

REPO_ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))

# --------------------------------------------------------------------------------------------
# Model zoo

#: Task from the config name when a model of the metafile has no result (rows beyond the papers).
_TASK_BY_NAME = [
    ('mask2former', 'coco-panoptic', 'Panoptic Segmentation'),
    ('mask2former', 'ade20k', 'Semantic Segmentation'),
    ('mask2former', 'coco', 'Instance Segmentation'),
    ('mask-rcnn', '', 'Instance Segmentation'),
    ('', 'ade20k', 'Semantic Segmentation'),
    ('', 'coco', 'Object Detection'),
    ('', 'shapes', 'Object Detection'),
    ('', 'in1k', 'Image Classification'),
    ('', 'cifar', 'Image Classification'),
]


def load_metafiles(root=REPO_ROOT):
    """[(metafile path, parsed metafile)] in the order ``model-index.yml`` imports them."""
    with open(osp.join(root, 'model-index.yml'), encoding='utf-8') as f:
        index = yaml.safe_load(f)
    out = []
    for rel in index['Import']:
        with open(osp.join(root, rel), encoding='utf-8') as f:
            out.append((rel, yaml.safe_load(f)))
    return out


def model_task(model):
    """The tasks of a metafile model: from its results, else from its config name."""
    tasks = list(OrderedDict.fromkeys(r['Task'] for r in model.get('Results') or []))
    if tasks:
        return tasks
    name = model['Name']
    for algo, data, task in _TASK_BY_NAME:
        if algo in name and data in name:
            return [task]
    return ['-']


#: Shorter metric names for the zoo's cells.
_METRIC_NAMES = {'Top 1 Accuracy': 'top-1'}


def _fmt_metrics(metrics):
    out = []
    for k, v in metrics.items():
        for long, short in _METRIC_NAMES.items():
            k = k.replace(long, short)
        out.append(f'{k} {v}')
    return ', '.join(out)


def _cell(text):
    return str(text).replace('|', '\\|').replace('\n', ' ')


def model_zoo_rows(root=REPO_ROOT):
    """One dict per model of the metafiles: collection, name, config, task, paper, table,
    reproduced."""
    rows = []
    for _, meta in load_metafiles(root):
        for model in meta['Models']:
            paper, tables, reproduced = [], [], []
            for res in model.get('Results') or []:
                source = res.get('Source', '')
                metrics = _fmt_metrics(res['Metrics'])
                if source.startswith('reproduced here'):
                    reproduced.append(metrics)
                else:
                    paper.append(metrics)
                    tables.append(source)
            conv = model.get('Converted From')
            start = (f'[official weights]({conv["Weights"]}) + `{conv["Converter"]}`'
                     if conv else '')
            rows.append(dict(
                collection=model['In Collection'], name=model['Name'], config=model['Config'],
                start=start,
                task=', '.join(model_task(model)),
                data=model.get('Metadata', {}).get('Training Data', '-'),
                paper='; '.join(paper) or '-',
                table='; '.join(OrderedDict.fromkeys(tables)) or 'no published number',
                reproduced='; '.join(reproduced) or 'not yet'))
    return rows


def model_zoo_markdown(root=REPO_ROOT):
    """The model zoo page body (MyST Markdown): a section per collection with a table of its
    configs."""
    metas = load_metafiles(root)
    rows = model_zoo_rows(root)
    n_rep = sum(r['reproduced'] != 'not yet' for r in rows)
    lines = [
        '# Model zoo', '',
        f'{len(rows)} configs in {len(metas)} collections, generated when this site was built from '
        '`model-index.yml` and the `configs/*/metafile.yml` files it imports (which '
        '`tools/misc/sync_metafiles.py` writes from the config folders\' READMEs; `mim search '
        'mmposenc` lists the same models). "Paper" is the number the paper (or, for the '
        'host-model rows, the host\'s model zoo) reports for that setting, "table" where it is '
        'printed; "reproduced here" is a run of the config itself '
        f'({n_rep} of {len(rows)} so far). '
        'No checkpoint is published: the configs train from the hosts\' ImageNet weights or '
        'from scratch, and the converters turn official '
        'checkpoints into ours ([checkpoints and converters](/user_guides/checkpoints.md)); '
        'each config folder\'s README is under [Config folders](/_generated/configs/index.md).', '']
    for rel, meta in metas:
        for coll in meta.get('Collections', []):
            folder = osp.basename(osp.dirname(rel))
            paper = coll.get('Paper') or {}
            lines += [f'## {coll["Name"]}', '']
            intro = (f'Configs in `configs/{folder}/`, with the recipe and notes in its '
                     f'[README](/_generated/configs/{folder}.md)')
            if paper:
                intro += f'. Paper: [{paper["Title"]}]({paper["URL"]})'
            code = coll.get('Code', {}).get('URL')
            if code:
                intro += f'. Implementation: `{code}`'
            lines += [intro + '.', '']
            lines += ['| config | task, training data | paper | table | reproduced here |',
                      '| :-- | :-- | :-- | :-- | :-- |']
            for r in rows:
                if r['collection'] != coll['Name']:
                    continue
                config = f'`{osp.basename(r["config"])}`'
                if r['start']:
                    config += f'<br>start from: {r["start"]}'
                lines.append('| ' + ' | '.join(_cell(x) for x in (
                    config, f'{r["task"]}, {r["data"]}', r['paper'], r['table'],
                    r['reproduced'])) + ' |')
            lines.append('')
    return '\n'.join(lines)


# --------------------------------------------------------------------------------------------
# API reference

#: (section title, module) in page order; each lists the module's public names.
API_MODULES = [
    ('Position-encoding generators and encodings', 'mmposenc.models.layers'),
    ('Backbones', 'mmposenc.models.backbones'),
    ('Necks', 'mmposenc.models.necks'),
    ('Detectors (import mmdet / mmseg)', 'mmposenc.models.detectors'),
    ('Padding-exact mode: masks, image sizes, switch, masked primitives',
     'mmposenc.models.padding_exact'),
    ('Shared helpers', 'mmposenc.models.utils'),
    ('Test-time augmentation', 'mmposenc.models.tta'),
    ('Datasets and samplers', 'mmposenc.datasets'),
    ('Engine: checkpoints, mixed precision, quiet init', 'mmposenc.engine'),
    ('Analysis', 'mmposenc.analysis'),
    ('Config package (`mmposenc::`)', 'mmposenc.utils'),
    ('Registries', 'mmposenc.registry'),
]


def public_names(module):
    """The public names of a module: ``__all__``, else its non-module, non-underscore
    attributes defined in the package."""
    names = getattr(module, '__all__', None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith('_') and not inspect.ismodule(v)
                 and getattr(v, '__module__', '').startswith(module.__name__.rsplit('.', 1)[0])]
    return sorted(names, key=lambda n: (not inspect.isclass(getattr(module, n)), n.lower()))


def registered_classes():
    """{class: [registry name, ...]} over every registry of :mod:`mmposenc.registry` (found by
    type, so a new registry is covered), after importing every package that registers into
    them."""
    for mod in ('mmposenc.models', 'mmposenc.models.detectors', 'mmposenc.datasets',
                'mmposenc.engine'):
        importlib.import_module(mod)
    reg = importlib.import_module('mmposenc.registry')
    from mmengine.registry import Registry
    out = {}
    for rname, registry in sorted(vars(reg).items()):
        if not isinstance(registry, Registry) or registry.scope != 'mmposenc':
            continue
        registry.import_from_location()
        for cls in registry.module_dict.values():  # a renamed class: once per alias
            if rname not in out.setdefault(cls, []):
                out[cls].append(rname)
    return out


def api_entries():
    """[(section title, module name, [(kind, qualified name, registries)])] for the API pages.

    ``kind`` is ``'class'``, ``'function'`` or ``'data'``. A registered class its package does
    not export is listed in the section of the package that holds it; one outside every
    section's package is a ``RuntimeError`` naming it (add its package to :data:`API_MODULES`).
    """
    registered = registered_classes()
    listed = set()
    sections = []
    for title, modname in API_MODULES:
        module = importlib.import_module(modname)
        entries = []
        for name in public_names(module):
            obj = getattr(module, name)
            if inspect.isclass(obj):
                kind = 'class'
                listed.add(obj)
            elif inspect.isfunction(obj):
                kind = 'function'
            else:
                kind = 'data'
            regs = registered.get(obj, []) if kind == 'class' else []
            qualname = f'{modname}.{name}'
            if kind == 'data':  # document it where it is defined (its `#:` comment is there)
                qualname = f'{_defining_module(module, name, obj)}.{name}'
            entries.append((kind, qualname, regs))
        sections.append((title, modname, entries))
    # registered but not exported by its package: listed in the section of that package
    for cls in sorted((c for c in registered if c not in listed), key=lambda c: c.__name__):
        owners = [sec for sec in sections if cls.__module__.startswith(sec[1] + '.')]
        if owners:
            max(owners, key=lambda sec: len(sec[1]))[2].append(
                ('class', f'{cls.__module__}.{cls.__qualname__}', registered[cls]))
            listed.add(cls)
    missing = sorted(f'{c.__module__}.{c.__qualname__}' for c in registered if c not in listed)
    if missing:
        raise RuntimeError(f'registered classes missing from the API reference: {missing}; '
                           'export them from their package or add the module to '
                           'docs/_ext/docgen.py API_MODULES')
    return sections


def _defining_module(package, name, obj):
    """The deepest submodule of ``package`` that binds ``name`` to ``obj`` (a package's
    ``__init__`` only re-exports)."""
    import sys
    found = package.__name__
    for modname, mod in list(sys.modules.items()):
        if mod is not None and modname.startswith(package.__name__ + '.') and \
                getattr(mod, name, None) is obj and modname.count('.') > found.count('.'):
            found = modname
    return found


def api_markdown(title, modname, entries):
    """One API page (MyST Markdown with autodoc directives) for one module."""
    lines = [f'# {title}', '', f'`{modname}`', '']
    for kind, qualname, registries in entries:
        short = qualname.rsplit('.', 1)[1]
        lines += ['```{eval-rst}']
        if kind == 'class':
            lines += [f'.. autoclass:: {qualname}', '   :members:', '   :show-inheritance:']
            if registries:
                regs = ', '.join(f'``{r}``' for r in registries)
                lines += ['', f'   Registered in {regs}: ``type=\'mmposenc.{short}\'``.']
        elif kind == 'function':
            lines += [f'.. autofunction:: {qualname}']
        else:
            lines += [f'.. autodata:: {qualname}', '   :no-value:']
        lines += ['```', '']
    return '\n'.join(lines)


# --------------------------------------------------------------------------------------------
# Config READMEs

#: Anchors of the former long README -> the site page that has that section now.
README_ANCHORS = {
    'the-demo': 'get_started.md#the-demo',
    'install': 'get_started.md#install',
    'train-and-test': 'user_guides/train_test.md',
    'use-from-your-own-project': 'user_guides/own_project.md',
    'benchmarks': 'benchmarks.md',
    'tests': 'user_guides/testing.md',
}

_LINK = re.compile(r'(!?)\[([^\]]*)\]\(([^)\s]+)\)')


def config_folders(root=REPO_ROOT):
    """Config folders that have a README."""
    base = osp.join(root, 'configs')
    return sorted(d for d in __import__('os').listdir(base)
                  if osp.isfile(osp.join(base, d, 'README.md')))


def config_readme_markdown(folder, root=REPO_ROOT):
    """``configs/<folder>/README.md`` for the page ``configs/<folder>.md`` of the site.

    Links to config files become the file's path in code (the site does not host them), links
    to other config READMEs become links to their pages, links into ``docs/`` stay links, links
    to the top README go to the site's index; images are referenced where they are (the
    caller copies them next to the page)."""
    with open(osp.join(root, 'configs', folder, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    here = osp.join(root, 'configs', folder)

    def sub(m):
        bang, label, target = m.groups()
        if re.match(r'^[a-z]+://', target) or target.startswith('mailto:'):
            return m.group(0)
        path, _, anchor = target.partition('#')
        anchor = f'#{anchor}' if anchor else ''
        if not path:
            return m.group(0)
        full = osp.normpath(osp.join(here, path))
        rel = osp.relpath(full, root)
        if bang:
            return f'![{label}]({osp.basename(path)})'
        if rel == 'README.md':  # the README's sections now live on the site's pages
            page = README_ANCHORS.get(anchor[1:], 'index.md')
            return f'[{label}](../../{page})'
        if rel.startswith('docs' + osp.sep):
            return f'[{label}](../../{osp.relpath(full, osp.join(root, "docs"))}{anchor})'
        parts = rel.split(osp.sep)
        if parts[0] == 'configs' and len(parts) >= 2 and (
                len(parts) == 2 or parts[2] == 'README.md'):
            if parts[1] == folder:
                return f'[{label}]({anchor or "#"})' if anchor else label
            return f'[{label}]({parts[1]}.md{anchor})'
        code = label if label.startswith('`') else f'`{label}`'
        return code

    return _LINK.sub(sub, text)


def config_images(folder, root=REPO_ROOT):
    """Image files a config README shows (copied next to its page)."""
    with open(osp.join(root, 'configs', folder, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    return [osp.join(root, 'configs', folder, t.split('#')[0])
            for bang, _, t in _LINK.findall(text) if bang and '://' not in t]


# --------------------------------------------------------------------------------------------
# Test pages

_TEST_ROLE = re.compile(r'\{test\}`([^`]+)`')


def test_refs(doc_texts):
    """{test file: [test name, ...]} cited with ``{test}`tests/x.py::name``` in the texts."""
    refs = OrderedDict()
    for text in doc_texts:
        for ref in _TEST_ROLE.findall(text):
            path, _, name = ref.partition('::')
            names = refs.setdefault(path, [])
            if name and name not in names:
                names.append(name)
    return refs


def test_page_name(path):
    """Docname (under ``_generated/tests``) of the page of a test file."""
    return path[len('tests/'):-len('.py')].replace('/', '.') if path.startswith('tests/') \
        else path.replace('/', '.')


def test_anchor(path, name):
    """Label and HTML id of a test's section (``tests/a/test_b.py``, ``C.test_x`` ->
    ``test-a-test-b-c-test-x``), unique over the site."""
    return re.sub(r'[^a-z0-9]+', '-', f'{path[:-3]}-{name}'.lower()).strip('-')


def test_page_markdown(path, names, root=REPO_ROOT):
    """A page showing the cited tests of one test file (their source, from the file itself).

    Raises ``ValueError`` for a cited file or test that does not exist."""
    full = osp.join(root, path)
    if not osp.isfile(full):
        raise ValueError(f'the docs cite {path}, which does not exist')
    with open(full, encoding='utf-8') as f:
        src = f.read()
    tests = [n.split('.')[-1] for n in names if n.split('.')[-1].startswith('test')]
    select = f' -k "{" or ".join(tests)}"' if tests else ''
    lines = [f'# {path}', '', f'The tests of `{path}` that these pages cite (and the helpers '
             'that define their cases), shown from the file itself; run them with', '',
             '```bash', f'.venv/bin/python -m pytest {path}{select}', '```', '']
    doc = _module_docstring(src)
    if doc:
        lines += ['```text', doc, '```', '']
    for name in names:
        leaf = name.split('.')[-1]
        if not re.search(rf'^\s*(async\s+)?(def|class)\s+{re.escape(leaf)}\b', src, re.M):
            raise ValueError(f'the docs cite {path}::{name}, which does not exist')
        lines += [f'({test_anchor(path, name)})=', f'## `{name}`', '',
                  f'```{{literalinclude}} /{osp.relpath(full, osp.join(root, "docs"))}',
                  f':pyobject: {name}', ':language: python', '```', '']
    return '\n'.join(lines)


def _module_docstring(src):
    import ast
    try:
        return ast.get_docstring(ast.parse(src)) or ''
    except SyntaxError:
        return ''
