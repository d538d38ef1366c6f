"""The documentation site's generated pages and checks, without Sphinx (``make docs`` builds the
site itself; these run in ``make test``): the model zoo lists every config of the metafiles, the
API reference every registered class, every test a page cites exists, the site checker finds
broken links and unrendered placeholders, no page shows a placeholder (the built site where
``make docs`` has built it), and the README and the site's index list every method."""
import glob
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import yaml

from conftest import ON_CI, REPO_ROOT

sys.path.insert(0, osp.join(REPO_ROOT, 'docs', '_ext'))
sys.path.insert(0, osp.join(REPO_ROOT, 'tools', 'misc'))
import check_docs_links  # noqa: E402
import docgen  # noqa: E402

DOCS = osp.join(REPO_ROOT, 'docs')
SITE = osp.join(DOCS, '_build', 'html')
CHECKER = osp.join(REPO_ROOT, 'tools', 'misc', 'check_docs_links.py')


def _method_pages():
    """The pages (under docs/) of the methods: one per paper in docs/methods/, and the guide of
    the rotary encodings."""
    papers = sorted(f'methods/{name}' for name in os.listdir(osp.join(DOCS, 'methods'))
                    if name.endswith('.md') and name != 'index.md')
    return papers + ['user_guides/rotary.md']


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


def test_link_checker_finds_unrendered_placeholders(tmp_path):
    """Placeholders in a page's text fail the check; braces in code, maths, scripts and styles,
    and braces around what is not a Python expression, do not."""
    site = _site(tmp_path, {
        # the model zoo's intro before its string got its f prefix
        'index.html': '<title>mmposenc</title><p>&#8220;reproduced here&#8221; is a run of the '
                      'config itself ({n_rep} of {len(rows)} so far).</p>'
                      '<pre>cfg = dict(a={name}, b={len(rows)})</pre>'
                      '<p>run <code class="literal"><span class="pre">{folder}/{cfg!r}</span>'
                      '</code> on the set {0, 1} or {a, b}</p>'
                      '<span class="math notranslate">\\(\\frac{q_i}{k_j}\\)</span>'
                      '<div class="math notranslate"><p>\\[\\mathrm{PE}_{x}\\]</p></div>'
                      '<script>var s = {idx};</script><style>p {color: red}</style>',
        'a/page.html': '<img class="math" src="../index.html"><h1>Epoch {epoch}</h1>'
                       "<p>lr {cfg['lr']:.2f}</p>"})
    res = subprocess.run([sys.executable, CHECKER, site], capture_output=True, text=True)
    assert res.returncode == 1
    found = [line.split(': unrendered')[0] for line in res.stderr.splitlines()]
    assert found == ['a/page.html: {epoch}', "a/page.html: {cfg['lr']:.2f}",
                     'index.html: {n_rep}', 'index.html: {len(rows)}']
    assert '4 unrendered placeholders' in res.stdout


@pytest.fixture(scope='module')
def built_site():
    """The site ``make docs`` built (docs/_build/html); skips where it is not built, fails under
    CI, which builds it before the tests."""
    if not osp.isfile(osp.join(SITE, 'index.html')):
        msg = f'{SITE} not built (make docs builds it)'
        if ON_CI:
            pytest.fail(msg + ' -- under CI this is a failure, not a skip')
        pytest.skip(msg)
    return SITE


def test_built_pages_render_every_placeholder(built_site):
    pages = check_docs_links.parse_site(built_site)
    assert len(pages) > 50
    assert check_docs_links.check_placeholders(built_site) == [], \
        'unrendered placeholders on the site (rebuild it with make docs if it is older than ' \
        'the sources)'
    # the model zoo's intro shows its counts
    zoo = ' '.join(''.join(pages[osp.join(built_site, 'model_zoo.html')].text).split())
    n_rep, n_rows = map(int, re.search(r'\((\d+) of (\d+) so far\)', zoo).groups())
    assert n_rows == len(_metafile_configs()) and 0 <= n_rep <= n_rows


def _prose(markdown):
    """The text of a MyST page outside code, maths and role / directive names."""
    text = re.sub(r'^(`{3,}|~{3,}|:{3,}).*?^\1[ \t]*$', '', markdown, flags=re.M | re.S)
    text = re.sub(r'\{[\w:-]+\}(?=`)', '', text)  # {test}`...`, {py:class}`...`
    text = re.sub(r'(`+).+?\1', '', text, flags=re.S)
    return re.sub(r'\$\$.+?\$\$|\$[^$\n]+\$', '', text, flags=re.S)


def test_pages_render_every_placeholder():
    """Without Sphinx: the written pages, the model zoo and the config pages have no format
    placeholder outside code and maths (the built site: the test above)."""
    pages = {'model zoo': docgen.model_zoo_markdown(REPO_ROOT)}
    for folder in docgen.config_folders(REPO_ROOT):
        pages[f'configs/{folder}'] = docgen.config_readme_markdown(folder, REPO_ROOT)
    for path in glob.glob(osp.join(DOCS, '**', '*.md'), recursive=True):
        if '_generated' not in path and '_build' not in path:
            with open(path, encoding='utf-8') as f:
                pages[osp.relpath(path, DOCS)] = f.read()
    # the studies' READMEs, which docs/reproductions.md includes
    for path in glob.glob(osp.join(REPO_ROOT, 'projects', '*', 'README.md')):
        with open(path, encoding='utf-8') as f:
            pages[osp.relpath(path, REPO_ROOT)] = f.read()
    assert len(pages) > 30
    found = {name: check_docs_links.PLACEHOLDER.findall(_prose(text))
             for name, text in pages.items()}
    assert {name: phs for name, phs in found.items() if phs} == {}
    assert re.search(r'\(\d+ of \d+ so far\)', pages['model zoo'])


def _method_table_links(path):
    """The pages (relative to docs/) that the last column of a page's method table links."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    links = re.findall(r'^\| .* \| \[[^\]]+\]\(([^)#\s]+\.md)\) \|$', text, re.M)
    return [osp.relpath(osp.normpath(osp.join(osp.dirname(path), link)), DOCS)
            for link in links]


@pytest.mark.parametrize('page', ['index.md', 'methods/index.md'])
def test_site_index_lists_every_method(page):
    links = _method_table_links(osp.join(DOCS, page))
    for method in _method_pages():
        assert method in links, (page, method)
    for link in links:
        assert osp.isfile(osp.join(DOCS, link)), (page, link)
    if page == 'index.md':  # the landing page's table has the methods only
        assert sorted(links) == sorted(_method_pages())


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
    assert len(_method_pages()) >= 5
    for page in _method_pages():
        assert f'](docs/{page}) |' in text, page
