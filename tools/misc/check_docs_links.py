"""Check the internal links of the built documentation site (no network).

Every ``href`` and ``src`` of every HTML page under the site folder that is not an external URL
(``http(s)://``, ``mailto:``, ...) must name a file of the site, and a ``#fragment`` must be an
``id`` (or ``name``) in the target page. External links are counted, not fetched.

Usage::

    python tools/misc/check_docs_links.py docs/_build/html

Exits 1 and lists every broken link (page, target, reason); 0 otherwise.
"""
import argparse
import os
import os.path as osp
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """Links (``href`` / ``src``) and anchors (``id`` / ``name``) of one page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links = []
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get('id'):
            self.ids.add(attrs['id'])
        if tag == 'a' and attrs.get('name'):
            self.ids.add(attrs['name'])
        for key in ('href', 'src'):
            if attrs.get(key) is not None:
                self.links.append((tag, attrs[key]))


def parse(path):
    page = _Page()
    with open(path, encoding='utf-8', errors='replace') as f:
        page.feed(f.read())
    return page


def is_external(url):
    parts = urlsplit(url)
    return bool(parts.scheme) or url.startswith('//')


def check_site(root):
    """(broken links [(page, link, reason)], number of internal links, number of external)."""
    root = osp.abspath(root)
    pages = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            if name.endswith('.html'):
                path = osp.join(dirpath, name)
                pages[path] = parse(path)
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
    return 1 if broken else 0


if __name__ == '__main__':
    sys.exit(main())
