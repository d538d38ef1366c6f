"""Sphinx configuration of mmposenc's documentation site (``make docs``).

Markdown pages through myst-parser, the furo theme, autodoc + napoleon for the API reference,
copy buttons on code blocks. Nothing is fetched at build time: MathJax comes from the
django-static-mathjax package (requirements/docs.txt) and is copied into the site, so that the
equations render offline too.
"""
import os
import os.path as osp
import re
import sys

DOCS = osp.dirname(osp.abspath(__file__))
ROOT = osp.dirname(DOCS)
sys.path.insert(0, ROOT)
sys.path.insert(0, osp.join(DOCS, '_ext'))

from mmposenc.version import __version__  # noqa: E402

project = 'mmposenc'
author = 'mmposenc contributors'
copyright = 'mmposenc contributors'  # noqa: A001
version = release = __version__

extensions = [
    'myst_parser',
    'sphinx.ext.autodoc',
    'sphinx.ext.napoleon',
    'sphinx.ext.mathjax',
    'sphinx_copybutton',
    'mmposenc_docs',
]

source_suffix = {'.md': 'markdown'}
root_doc = 'index'
exclude_patterns = [
    '_build', 'Thumbs.db', '.DS_Store',
    # study outputs that docs/reproductions.md links as files (tables, run logs), not pages
    'reproductions/*/**',
]

# MyST: $...$ / $$...$$ maths, ::: fences, and heading ids as GitHub makes them, so that
# links written for GitHub (`README.md#the-demo`) work on the site too.
myst_enable_extensions = ['dollarmath', 'amsmath', 'colon_fence', 'deflist']
myst_heading_anchors = 4

# autodoc + napoleon (Google style: Args / Returns / Examples)
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
autodoc_inherit_docstrings = False
autodoc_default_options = {'exclude-members': 'training, dump_patches, call_super_init'}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# copy buttons: leave out prompts (`$ `, `>>> `, `... `) and outputs
copybutton_prompt_text = r'>>> |\.\.\. |\$ '
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = False

html_theme = 'furo'
html_title = f'mmposenc {release}'
html_static_path = ['_static']
html_css_files = ['mmposenc.css']
html_theme_options = {
    'source_repository': None,
    'navigation_with_keys': True,
}
html_show_sourcelink = False
html_last_updated_fmt = None

# MathJax 3 from the installed django-static-mathjax package: copied into _static/mathjax at
# build time (es5/tex-chtml.js and its fonts), so the site needs no CDN.
try:
    import mathjax as _mathjax  # django-static-mathjax
    _MATHJAX = osp.join(osp.dirname(_mathjax.__file__), 'static', 'mathjax', 'es5')
except ImportError:  # pragma: no cover - requirements/docs.txt installs it
    _MATHJAX = None
mathjax_path = 'mathjax/tex-chtml.js'


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != 'html':
        return
    if _MATHJAX is None:
        raise RuntimeError('django-static-mathjax is not installed (requirements/docs.txt): '
                           'run `make docs`, which installs it')
    import shutil
    dst = osp.join(app.outdir, '_static', 'mathjax')
    os.makedirs(dst, exist_ok=True)
    shutil.copyfile(osp.join(_MATHJAX, 'tex-chtml.js'), osp.join(dst, 'tex-chtml.js'))
    # the fonts, the menu and the TeX extensions it loads on demand (autoload)
    for sub in (osp.join('output', 'chtml', 'fonts', 'woff-v2'), 'ui',
                osp.join('input', 'tex', 'extensions')):
        shutil.copytree(osp.join(_MATHJAX, sub), osp.join(dst, sub), dirs_exist_ok=True)

_LONE_STAR = re.compile(r'(?<![\\*\w`])\*(?=[),\]])')


def _escape_star_args(app, what, name, obj, options, lines):
    """Stars that reST would read as unbalanced emphasis, escaped before napoleon parses the
    docstring: ``*args, **kwargs: ...`` in an Args section (one entry for both) and a lone
    ``*`` in a shape such as (N, C, *) outside inline literals."""
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(('*args', '**kwargs')):
            head, sep, rest = stripped.partition(':')
            head = head.replace('**', r'\*\*').replace('*args', r'\*args')
            line = line[:len(line) - len(stripped)] + head + sep + rest
        if stripped.startswith(('>>>', '...')):  # doctest lines are shown literally
            lines[i] = line
            continue
        parts = line.split('``')
        for j in range(0, len(parts), 2):  # even parts are outside ``literals``
            parts[j] = _LONE_STAR.sub(r'\\*', parts[j])
        lines[i] = '``'.join(parts)


def setup(app):
    app.connect('build-finished', _copy_mathjax)
    # before napoleon's own handler (priority 500)
    app.connect('autodoc-process-docstring', _escape_star_args, priority=100)
