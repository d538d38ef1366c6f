"""The documentation site's generated pages and checks, without Sphinx (``make docs`` builds the
site itself; these run in ``make test``): the model zoo lists every config of the metafiles, the
API reference every registered class, every test a page cites exists, the internal-link checker
finds broken links, and the README stays a landing page."""
import os.path as osp
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO_ROOT

sys.path.insert(0, osp.join(REPO_ROOT, 'docs', '_ext'))
import docgen  # noqa: E402

DOCS = osp.join(REPO_ROOT, 'docs')
CHECKER = osp.join(REPO_ROOT, 'tools', 'misc', 'check_docs_links.py')


def _metafile_configs():
    with open(osp.join(REPO_ROOT, 'model-index.yml')) as f:
        index = yaml.safe_load(f)
    configs = []
    for rel in index['Import']:
        with open(osp.join(REPO_ROOT, rel)) as f:
            configs += [m['Config'] for m in yaml.safe_load(f)['Models']]
    return configs


def _zoo_rows(markdown):
    """{config path: [cells after the config]} of the model zoo's table rows; each section says
    its folder ("Configs in `configs/<folder>/`, ...")."""
    rows, folder = {}, None
    for line in markdown.splitlines():
        m = re.match(r"^Configs in `(configs/[^`]+/)`", line)
        if m:
            folder = m.group(1)
        m = re.match(r'^\| `([^`/]+\.py)`(<br>[^|]*)? \|(.*)\|$', line)
        if m:
            rows[folder + m.group(1)] = [c.strip() for c in m.group(3).split(' | ')]
    return rows


def test_model_zoo_lists_every_config_of_the_metafiles():
    configs = _metafile_configs()
    assert len(configs) > 100
    rows = _zoo_rows(docgen.model_zoo_markdown(REPO_ROOT))
    assert sorted(rows) == sorted(configs)
    for config, (task, paper, table, reproduced) in rows.items():
        assert osp.isfile(osp.join(REPO_ROOT, config)), config
        assert task and not task.startswith('-'), config
        assert reproduced, config
        # a paper number comes with the table it is printed in
        assert (paper == '-') == (table == 'no published number'), (config, paper, table)


def test_model_zoo_page_changes_with_the_metafiles(tmp_path):
    """Generated, not copied: a model added to a metafile appears on the page, with its
    task, paper number and table."""
    import shutil
    shutil.copy(osp.join(REPO_ROOT, 'model-index.yml'), tmp_path)
    for rel in yaml.safe_load(open(osp.join(REPO_ROOT, 'model-index.yml')))['Import']:
        (tmp_path / osp.dirname(rel)).mkdir(parents=True, exist_ok=True)
        shutil.copy(osp.join(REPO_ROOT, rel), tmp_path / rel)
    meta_path = tmp_path / 'configs' / 'cpvt' / 'metafile.yml'
    meta = yaml.safe_load(meta_path.read_text())
    meta['Models'].append(dict(
        Name='cpvt-huge_1xb1_in1k', **{'In Collection': 'CPVT'},
        Config='configs/cpvt/cpvt-huge_1xb1_in1k.py',
        Results=[dict(Task='Image Classification', Dataset='ImageNet-1k',
                      Metrics={'Top 1 Accuracy': 99.9}, Source='[L] Table 99'),
                 dict(Task='Image Classification', Dataset='ImageNet-1k',
                      Metrics={'Top 1 Accuracy': 98.1}, Source='reproduced here (top-1)')]))
    meta_path.write_text(yaml.safe_dump(meta))
    row = _zoo_rows(docgen.model_zoo_markdown(str(tmp_path)))['configs/cpvt/cpvt-huge_1xb1_in1k.py']
    assert row == ['Image Classification, -', 'top-1 99.9', '[L] Table 99', 'top-1 98.1']


def test_api_reference_lists_every_registered_class():
    listed = {qualname for _, _, entries in docgen.api_entries() for _, qualname, _ in entries}
    registered = docgen.registered_classes()
    assert len(registered) > 30
    for cls, registries in registered.items():
        names = {f'{mod}.{cls.__name__}' for mod in (
            cls.__module__, cls.__module__.rsplit('.', 1)[0],
            cls.__module__.rsplit('.', 2)[0])}
        assert names & listed, (cls, registries)


def test_api_reference_refuses_a_registered_class_it_cannot_place(monkeypatch):
    monkeypatch.setattr(docgen, 'API_MODULES', [m for m in docgen.API_MODULES
                                                if m[1] != 'mmposenc.models.necks'])
    with pytest.raises(RuntimeError, match='MaskedChannelMapper.*SimplePyramid'):
        docgen.api_entries()


def _doc_texts():
    import glob
    texts = []
    for path in glob.glob(osp.join(DOCS, '**', '*.md'), recursive=True):
        if '_generated' not in path and '_build' not in path:
            texts.append(open(path, encoding='utf-8').read())
    return texts


def test_every_test_the_pages_cite_exists():
    refs = docgen.test_refs(_doc_texts())
    assert sum(len(v) for v in refs.values()) > 50
    for path, names in refs.items():
        page = docgen.test_page_markdown(path, names, REPO_ROOT)
        for name in names:
            assert f'## `{name}`' in page


def test_a_citation_of_a_missing_test_is_an_error():
    with pytest.raises(ValueError, match='test_peg.py::test_no_such_test, which does not exist'):
        docgen.test_page_markdown('tests/test_layers/test_peg.py', ['test_no_such_test'])
    with pytest.raises(ValueError, match='tests/test_nothing.py, which does not exist'):
        docgen.test_page_markdown('tests/test_nothing.py', [])


def _site(tmp_path, pages):
    for rel, html in pages.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(html)
    return str(tmp_path)


def test_link_checker_finds_broken_files_and_anchors(tmp_path):
    site = _site(tmp_path, {
        'index.html': '<a href="a/page.html#here">ok</a> <a href="a/page.html#gone">anchor</a>'
                      '<a href="missing.html">file</a> <img src="_static/x.png">'
                      '<a href="https://example.org/x.html">external</a> <a href="#top">top</a>'
                      '<span id="top"></span> <a href="../outside.html">out</a>',
        'a/page.html': '<h2 id="here">Here</h2><a href="../index.html">back</a>',
        '_static/x.png': 'png'})
    res = subprocess.run([sys.executable, CHECKER, site], capture_output=True, text=True)
    assert res.returncode == 1
    broken = sorted(line.split(': ', 1)[1] for line in res.stderr.splitlines())
    assert broken == ['../outside.html: points outside the site',
                      'a/page.html#gone: no id "gone" in a/page.html',
                      'missing.html: no such file']
    assert '7 internal links checked, 3 broken; 1 external links not fetched' in res.stdout


def test_link_checker_passes_a_good_site(tmp_path):
    site = _site(tmp_path, {'index.html': '<a href="b.html#x">b</a>',
                            'b.html': '<section id="x"><a href="index.html">a</a></section>'})
    res = subprocess.run([sys.executable, CHECKER, site], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_readme_is_a_landing_page():
    with open(osp.join(REPO_ROOT, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    lines = text.splitlines()
    assert len(lines) <= 150, len(lines)
    # the two commands at the top
    assert lines[3].startswith('make demo') and lines[4].startswith('make test')
    # every relative link of the README names a file of the repository
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
        if '://' in target:
            continue
        path = target.split('#')[0]
        assert osp.exists(osp.join(REPO_ROOT, path)), target
    # one line per method, each linking its page
    for method in ('cpvt', 'pervit', 'cape', 'sape2'):
        assert f'](docs/methods/{method}.md)' in text
