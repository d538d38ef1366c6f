"""Check the built documentation site: its internal links and its unrendered placeholders (no
network).

Every ``href`` and ``src`` of every HTML page under the site folder that is not an external URL
(``http(s)://``, ``mailto:``, ...) must name a file of the site, and a ``#fragment`` must be an
``id`` (or ``name``) in the target page. External links are counted, not fetched.

No page may show a Python format placeholder, ``{name}`` or ``{len(rows)}`` (a generated page's
string that lost its ``f`` prefix), in its text outside code (``pre``, ``code``, ...) and maths,
where braces are legitimate.

Usage::

    python tools/misc/check_docs_links.py docs/_build/html

Exits 1 and lists every broken link (page, target, reason) and every placeholder (page, the
placeholder, its sentence); 0 otherwise.
"""
import argparse
import os
import os.path as osp
import re
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

#: Elements whose text may hold braces: code, maths (MathJax's ``span.math`` / ``div.math``),
#: scripts and styles.
_NO_TEXT = {'pre', 'code', 'kbd', 'samp', 'tt', 'script', 'style', 'textarea', 'math'}

#: Elements without an end tag (never the start of a skipped element).
_VOID = {'area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta', 'source',
         'track', 'wbr'}

#: A format placeholder: an identifier, attribute, call or index expression in single braces,
#: with an optional conversion and format spec (``{n_rep}``, ``{len(rows)}``, ``{cfg['a']:.2f}``).
PLACEHOLDER = re.compile(
    r"\{[A-Za-z_](?:[\w.]|\([\w.,'\" ]*\)|\[[\w.'\"-]*\])*(?:![rsa])?(?::[^{}\s]*)?\}")


class _Page(HTMLParser):
    """Links (``href`` / ``src``), anchors (``id`` / ``name``) and the text outside code and
    maths of one page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []
        self.ids = set()
        self.text = []
        self._skip = None  # [tag, depth] of the code or maths element being read

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get('id'):
            self.ids.add(attrs['id'])
        if tag == 'a' and attrs.get('name'):
            self.ids.add(attrs['name'])
        for key in ('href', 'src'):
            if attrs.get(key) is not None:
                self.links.append((tag, attrs[key]))
        if self._skip is not None:
            if tag == self._skip[0]:
                self._skip[1] += 1
        elif tag in _NO_TEXT or (tag not in _VOID
                                 and 'math' in (attrs.get('class') or '').split()):
            self._skip = [tag, 1]

    def handle_endtag(self, tag):
        if self._skip is not None and tag == self._skip[0]:
            self._skip[1] -= 1
            if not self._skip[1]:
                self._skip = None

    def handle_data(self, data):
        if self._skip is None:
            self.text.append(data)


def parse(path):
    page = _Page()
    with open(path, encoding='utf-8', errors='replace') as f:
        page.feed(f.read())
    return page


def is_external(url):
    parts = urlsplit(url)
    return bool(parts.scheme) or url.startswith('//')


def parse_site(root):
    """{path: parsed page} of every HTML page under ``root``."""
    pages = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith('.html'):
                path = osp.join(dirpath, name)
                pages[path] = parse(path)
    return pages


def placeholders(page):
    """[(placeholder, its context)] of one parsed page: format placeholders in its text outside
    code and maths."""
    text = ' '.join(''.join(page.text).split())
    return [(m.group(0), text[max(0, m.start() - 40):m.end() + 40])
            for m in PLACEHOLDER.finditer(text)]


def check_placeholders(root):
    """[(page, placeholder, context)] over the site: the placeholders a page shows unrendered."""
    root = osp.abspath(root)
    return [(osp.relpath(path, root), ph, ctx)
            for path, page in sorted(parse_site(root).items()) for ph, ctx in placeholders(page)]


def check_site(root):
    """(broken links [(page, link, reason)], number of internal links, number of external)."""
    root = osp.abspath(root)
    pages = parse_site(root)
    broken, n_internal, n_external = [], 0, 0
    for path, page in sorted(pages.items()):
        for tag, link in page.links:
            if not link or link.startswith(('javascript:', 'data:')):
                continue
            if is_external(link):
                n_external += 1
                continue
            n_internal += 1
            parts = urlsplit(link)
            target = path if not parts.path else osp.normpath(
                osp.join(osp.dirname(path), unquote(parts.path)))
            if osp.isdir(target):
                target = osp.join(target, 'index.html')
            rel = osp.relpath(path, root)
            if not target.startswith(root + os.sep) and target != root:
                broken.append((rel, link, 'points outside the site'))
                continue
            if not osp.isfile(target):
                broken.append((rel, link, 'no such file'))
                continue
            if parts.fragment and target.endswith('.html'):
                target_page = pages.get(target) or parse(target)
                if unquote(parts.fragment) not in target_page.ids:
                    broken.append((rel, link, f'no id "{parts.fragment}" in '
                                   f'{osp.relpath(target, root)}'))
    return broken, n_internal, n_external


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('site', help='the built site, e.g. docs/_build/html')
    args = parser.parse_args(argv)
    if not osp.isfile(osp.join(args.site, 'index.html')):
        print(f'{args.site} has no index.html: build the site first (make docs)', file=sys.stderr)
        return 2
    broken, n_int, n_ext = check_site(args.site)
    for page, link, reason in broken:
        print(f'{page}: {link}: {reason}', file=sys.stderr)
    print(f'{n_int} internal links checked, {len(broken)} broken; {n_ext} external links '
          'not fetched')
    unrendered = check_placeholders(args.site)
    for page, placeholder, context in unrendered:
        print(f'{page}: {placeholder}: unrendered placeholder in "{context}"', file=sys.stderr)
    print(f'{len(unrendered)} unrendered placeholders')
    return 1 if broken or unrendered else 0


if __name__ == '__main__':
    sys.exit(main())
