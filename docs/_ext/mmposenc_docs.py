"""Sphinx glue for mmposenc's site: writes the generated pages before Sphinx reads the sources,
and adds the ``{test}`` role that links a claim to the test that checks it.

Generated (under ``docs/_generated/``, ignored by git, rewritten on every build):

- ``model_zoo_tables.md``: the model zoo from the metafiles (``docgen.model_zoo_markdown``);
- ``api/<module>.md``: the API reference, autodoc entries per public name and registered class;
- ``configs/<folder>.md``: each config folder's README (links rewritten) and its images;
- ``tests/<file>.md``: the source of every test a page cites with ``{test}`tests/x.py::name```.
"""
import glob
import os
import os.path as osp
import shutil

from docutils import nodes

import docgen

DOCS = osp.dirname(osp.dirname(osp.abspath(__file__)))
GEN = osp.join(DOCS, '_generated')


def _write(path, text):
    """Write only when the text changed, so that Sphinx re-reads only what changed."""
    os.makedirs(osp.dirname(path), exist_ok=True)
    if osp.isfile(path):
        with open(path, encoding='utf-8') as f:
            if f.read() == text:
                return
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def generate(app):
    root = docgen.REPO_ROOT
    wanted = set()

    def out(rel, text):
        wanted.add(osp.join(GEN, rel))
        _write(osp.join(GEN, rel), text)

    out('model_zoo_tables.md', docgen.model_zoo_markdown(root))

    sections = docgen.api_entries()
    registries = sorted({r for regs in docgen.registered_classes().values() for r in regs})
    api_index = ['# API reference', '',
                 'Every class registered in mmposenc\'s registries (`mmposenc.registry`: '
                 + ', '.join(f'`{r}`' for r in registries) + '; configs name them '
                 '`type=\'mmposenc.X\'`) and every public function of the packages, from '
                 'their docstrings.', '', '```{toctree}', ':maxdepth: 1', '']
    for title, modname, entries in sections:
        out(f'api/{modname}.md', docgen.api_markdown(title, modname, entries))
        api_index.append(modname)
    api_index += ['```', '']
    out('api/index.md', '\n'.join(api_index))

    cfg_index = ['# Config folders', '',
                 'Each folder of `configs/` has a README with the paper\'s numbers, the recipe '
                 'and what its tests check; these pages show them.', '', '```{toctree}',
                 ':maxdepth: 1', '']
    for folder in docgen.config_folders(root):
        out(f'configs/{folder}.md', docgen.config_readme_markdown(folder, root))
        for img in docgen.config_images(folder, root):
            dst = osp.join(GEN, 'configs', osp.basename(img))
            wanted.add(dst)
            if not osp.isfile(dst) or os.path.getmtime(dst) < os.path.getmtime(img):
                shutil.copyfile(img, dst)
        cfg_index.append(folder)
    cfg_index += ['```', '']
    out('configs/index.md', '\n'.join(cfg_index))

    texts = []
    for path in glob.glob(osp.join(DOCS, '**', '*.md'), recursive=True):
        if not path.startswith(GEN) and '_build' not in path:
            with open(path, encoding='utf-8') as f:
                texts.append(f.read())
    refs = docgen.test_refs(texts)
    test_index = ['# Tests cited in these pages', '',
                  'The pages link each claim to the test that checks it; these pages show '
                  'those tests from the files themselves. `make test` runs them all.', '',
                  '```{toctree}', ':maxdepth: 1', '']
    for path, names in sorted(refs.items()):
        page = docgen.test_page_name(path)
        out(f'tests/{page}.md', docgen.test_page_markdown(path, names, root))
        test_index.append(page)
    test_index += ['```', '']
    out('tests/index.md', '\n'.join(test_index))

    for path in glob.glob(osp.join(GEN, '**', '*'), recursive=True):
        if osp.isfile(path) and path not in wanted:
            os.remove(path)


def test_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{test}`tests/x.py::name``` -> a link to that test's section on its generated page."""
    path, _, test = text.partition('::')
    env = inliner.document.settings.env
    target = f'_generated/tests/{docgen.test_page_name(path)}'
    uri = env.app.builder.get_relative_uri(env.docname, target)
    if test:
        uri += '#' + docgen.test_anchor(path, test)
    label = f'{path}::{test}' if test else path
    node = nodes.reference(rawtext, '', internal=True, refuri=uri)
    node += nodes.literal(label, label)
    return [node], []


def setup(app):
    app.connect('builder-inited', generate)
    app.add_role('test', test_role)
    return dict(parallel_read_safe=True, parallel_write_safe=True)
