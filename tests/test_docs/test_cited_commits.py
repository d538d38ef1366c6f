"""Every commit id that the documentation cites as evidence (README.md, docs/, and the config
and study READMEs the site renders) is a commit of this repository's history: ``git cat-file -e
<id>^{commit}`` succeeds. docs/reproductions.md once cited four commits of an unlanded branch
(issue 21 item 9)."""
import glob
import os.path as osp
import re
import shutil
import subprocess

import pytest

from conftest import REPO_ROOT

# a 7-40 digit hex token with at least one digit and one letter, not part of a longer word,
# number, path or URL (a hash inside a link to another repository is that repository's)
COMMIT_ID = re.compile(r'(?<![0-9A-Za-z_./:#=-])([0-9a-f]{7,40})(?![0-9A-Za-z_/-])')


def cited_commit_ids(text):
    """The commit-like ids in ``text``, in order of first appearance.

    Args:
        text (str): Markdown or reStructuredText.

    Returns:
        list[str]: Hex tokens of 7-40 characters with at least one digit and one letter
        a-f (plain numbers and words such as ``defaced`` are not ids).

    Examples:
        >>> cited_commit_ids('run on commit 4058d3c, see github.com/o/r/blob/4058d3c/x 1234567')
        ['4058d3c']
    """
    ids = []
    for token in COMMIT_ID.findall(text):
        if re.search('[0-9]', token) and re.search('[a-f]', token) and token not in ids:
            ids.append(token)
    return ids


def _documents():
    paths = [osp.join(REPO_ROOT, 'README.md')]
    for pattern in ('docs/**/*.md', 'docs/**/*.rst', 'configs/**/README.md',
                    'projects/**/README.md'):
        paths += glob.glob(osp.join(REPO_ROOT, pattern), recursive=True)
    skip = (osp.join(REPO_ROOT, 'docs', '_build'), osp.join(REPO_ROOT, 'docs', '_generated'))
    return sorted(p for p in paths if not p.startswith(skip))


DOCUMENTS = _documents()


def _unresolved(ids):
    """The ids of ``ids`` that are not commits of the repository (one ``git cat-file`` call)."""
    query = ''.join(f'{i}^{{commit}}\n' for i in ids)
    out = subprocess.run(['git', 'cat-file', '--batch-check'], input=query, cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout.splitlines()
    # a commit answers '<sha> commit <size>'; anything else ('missing', 'ambiguous') is not one
    return [i for i, line in zip(ids, out) if line.split()[1:2] != ['commit']]


def _history_or_skip():
    if not osp.exists(osp.join(REPO_ROOT, '.git')):
        pytest.skip('no .git: a source tree without history cannot resolve commit ids')
    if shutil.which('git') is None:
        pytest.skip('git is not installed')
    shallow = subprocess.run(['git', 'rev-parse', '--is-shallow-repository'], cwd=REPO_ROOT,
                             capture_output=True, text=True).stdout.strip()
    if shallow == 'true':
        pytest.skip('shallow clone: older commits are absent (fetch the full history)')


def test_the_scanner_finds_ids_and_ignores_paths_numbers_and_words():
    text = ('code of commit bd48d6b and 84f7eff; (6ed80af: Eq. 10) at `3d3b909`.\n'
            'https://github.com/whai362/PVT/blob/1e8066a4/x.py, 2026112, 12345678, '
            'sha256=ab12cd34ef, defaced, 0x1f2e3d4c, img_4058d3c.png, v1.2.3')
    assert cited_commit_ids(text) == ['bd48d6b', '84f7eff', '6ed80af', '3d3b909']


def test_documents_are_found():
    names = {osp.relpath(p, REPO_ROOT) for p in DOCUMENTS}
    assert {'README.md', osp.join('docs', 'reproductions.md'),
            osp.join('configs', 'peg_deformable_detr', 'README.md')} <= names


def test_an_unlanded_commit_does_not_resolve():
    """The check can fail: an id that was never in the history is reported."""
    _history_or_skip()
    head = subprocess.run(['git', 'rev-parse', '--short=7', 'HEAD'], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()
    assert _unresolved([head, '4058d3c']) == ['4058d3c']


@pytest.mark.parametrize('path', DOCUMENTS, ids=lambda p: osp.relpath(p, REPO_ROOT))
def test_every_cited_commit_is_in_the_history(path):
    _history_or_skip()
    with open(path, encoding='utf-8') as f:
        ids = cited_commit_ids(f.read())
    if not ids:
        return
    missing = _unresolved(ids)
    assert not missing, (
        f'{osp.relpath(path, REPO_ROOT)} cites {", ".join(missing)}, not commits of this '
        f'repository: cite the commit that is in `git log` (or say the provenance is unknown)')
