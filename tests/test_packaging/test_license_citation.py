"""LICENSE (Apache-2.0, as the OpenMMLab hosts) and CITATION.cff (Citation File Format 1.2.0)."""
import os.path as osp
import re

import yaml

import mmposenc
from conftest import REPO_ROOT


def test_license_is_the_apache_2_text():
    text = open(osp.join(REPO_ROOT, 'LICENSE'), encoding='utf-8').read()
    assert text.startswith('Copyright 2026 mmposenc contributors.\n')
    words = text.split()
    for phrase in ('Apache License Version 2.0, January 2004',
                   'TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION',
                   '9. Accepting Warranty or Additional Liability.',
                   'END OF TERMS AND CONDITIONS',
                   'Copyright 2026 mmposenc contributors. Licensed under the Apache License'):
        assert phrase in ' '.join(words), phrase
    assert '[yyyy]' not in text and '[name of copyright owner]' not in text
    # the nine sections of the terms, in order
    assert re.findall(r'^\s+(\d)\. [A-Z]', text, re.M) == [str(i) for i in range(1, 10)]


def test_citation_cff():
    """The fields CFF 1.2.0 requires (validated once with cffconvert --validate), this
    package's version and license, and the four papers mmposenc implements, each with the
    arXiv address our config READMEs cite."""
    with open(osp.join(REPO_ROOT, 'CITATION.cff'), encoding='utf-8') as f:
        cff = yaml.safe_load(f)
    assert cff['cff-version'] == '1.2.0'
    assert cff['message'] and cff['title'] and cff['authors'] == [
        {'name': 'mmposenc contributors'}]
    assert cff['version'] == mmposenc.__version__ and cff['license'] == 'Apache-2.0'
    papers = {r['identifiers'][0]['value']: r for r in cff['references']}
    readmes = {'cpvt': '2102.10882', 'pervit': '2206.06801', 'cape': '2106.03143',
               'sape2': '2505.09466'}
    for folder, arxiv in readmes.items():
        url = f'https://arxiv.org/abs/{arxiv}'
        readme = open(osp.join(REPO_ROOT, 'configs', folder, 'README.md'),
                      encoding='utf-8').read()
        assert f'[{papers[url]["title"]}]({url})' in readme, folder
        assert papers[url]['authors'] and isinstance(papers[url]['year'], int)
    assert len(papers) == 4
