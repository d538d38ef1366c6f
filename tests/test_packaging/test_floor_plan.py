"""The floor plan of ``docs/architecture.md`` is the one the code's imports draw.

The page's room table names each room of the package, its floor, and the rooms it imports; this
test draws the same table from the code (module-level imports, found with ``ast``) and compares:
an arrow the code has and the page lacks fails, and so does an arrow the page draws and the code
no longer has. Arrows run only down (to a lower floor) or within a floor's own room. It also
checks where the hosts may be imported and that every per-call context variable left
(:data:`~mmposenc.models.utils.call_state.CALL_STATES`) is listed on the page with its reason.
"""
import ast
import importlib
import os.path as osp
import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO / 'mmposenc'
PAGE = REPO / 'docs' / 'architecture.md'

#: Hosts, and the rooms allowed to import each at module level.
HOST_ROOMS = {
    # datasets: the checked CocoDataset / ADE20KDataset, each behind ``except ImportError``
    'mmdet': {'models.detectors', 'datasets'},
    'mmseg': {'models.detectors', 'datasets'},
    'mmpretrain': {'models.backbones'},
}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def room_of(module: str) -> str:
    """The room of a module: its package below ``mmposenc``, two levels under ``models``, three
    under ``models.layers`` (each subpackage or module of the layers is a room)."""
    parts = module.split('.')[1:]
    if not parts:
        return '(package)'
    if parts[0] == 'models':
        if len(parts) == 1:
            return 'models'
        if parts[1] == 'layers' and len(parts) > 2:
            return f'models.layers.{parts[2]}'
        return f'models.{parts[1]}'
    return parts[0]


def module_level_imports(path: pathlib.Path):
    """Names imported at module level (not inside functions or ``TYPE_CHECKING`` blocks)."""
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == '__init__.py' else module_name(path).rsplit(
        '.', 1)[0]
    found = []

    def visit(body):
        for node in body:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split('.')[:len(package.split('.')) - node.level + 1]
                    target = '.'.join(base + ([node.module] if node.module else []))
                    if node.module:
                        found.append(target)
                    else:
                        found.extend(f'{target}.{alias.name}' for alias in node.names)
                else:
                    found.append(node.module)
            elif isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if 'TYPE_CHECKING' not in test:
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
    visit(tree.body)
    return found


def code_arrows():
    arrows, hosts = set(), {}
    for path in sorted(PACKAGE.rglob('*.py')):
        if '.mim' in path.parts:
            continue
        source = room_of(module_name(path))
        for target in module_level_imports(path):
            top = target.split('.')[0]
            if top == 'mmposenc':
                room = room_of(target)
                if room != source:
                    arrows.add((source, room))
            elif top in HOST_ROOMS:
                hosts.setdefault(top, set()).add((source, str(path.relative_to(REPO))))
    return arrows, hosts


def page_rooms():
    """``{room: (floor, {imported rooms})}`` from the page's room table."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        match = re.match(r'^\|\s*`([\w.()]+)`\s*\|\s*(\d+)\s*\|([^|]*)\|', line)
        if match:
            room, floor, imports = match.groups()
            rows[room] = (int(floor), set(re.findall(r'`([\w.()]+)`', imports)))
    return rows


def test_page_lists_every_room():
    rooms = {room_of(module_name(p)) for p in PACKAGE.rglob('*.py') if '.mim' not in p.parts}
    assert rooms == set(page_rooms()), 'docs/architecture.md room table out of date'


def test_page_arrows_are_the_code_arrows():
    arrows, _ = code_arrows()
    drawn = {(room, target) for room, (_, targets) in page_rooms().items() for target in targets}
    assert arrows - drawn == set(), 'imports the floor plan does not draw'
    assert drawn - arrows == set(), 'arrows the code no longer has'


def test_arrows_run_down():
    rooms = page_rooms()
    up = [(a, b) for a, (floor, targets) in rooms.items() for b in targets
          if rooms[b][0] >= floor]
    assert up == [], 'imports that run sideways or back up a floor'


def test_hosts_imported_only_in_their_rooms():
    _, hosts = code_arrows()
    wrong = sorted((host, path) for host, found in hosts.items() for room, path in found
                   if room not in HOST_ROOMS[host])
    assert wrong == []


def test_padding_exact_core_imports_no_host():
    core = PACKAGE / 'models' / 'padding_exact'
    if not core.is_dir():
        pytest.fail('mmposenc/models/padding_exact (the core package) is missing')
    for path in core.rglob('*.py'):
        tops = {t.split('.')[0] for t in module_level_imports(path)}
        assert not tops & {'mmdet', 'mmseg', 'mmpretrain'}, path


def test_every_call_state_is_listed_with_its_reason():
    importlib.import_module('mmposenc.models')
    importlib.import_module('mmposenc.models.detectors')
    from mmposenc.models.utils.call_state import CALL_STATES
    listed = dict(re.findall(r'^\|\s*`(mmposenc_\w+)`\s*\|\s*`[^`]+`\s*\|\s*([^|]+?)\s*\|',
                             PAGE.read_text(), flags=re.M))
    # the package's (a docstring example may register one of its own)
    ours = {n: why for n, why in CALL_STATES.items() if n.startswith('mmposenc_')}
    assert set(listed) == set(ours), 'docs/architecture.md context-variable list'
    assert all(ours.values()), [n for n, why in ours.items() if not why]


def test_room_of_reads_packages():
    assert room_of('mmposenc.models.layers.encodings.cape') == 'models.layers.encodings'
    assert room_of('mmposenc.models.layers.grid') == 'models.layers.grid'
    assert room_of('mmposenc.models.layers') == 'models.layers'
    assert room_of('mmposenc.models.detectors.padding_exact.dense') == 'models.detectors'
    assert room_of('mmposenc.registry') == 'registry'
    assert osp.isfile(PAGE)


def test_no_tool_or_study_reaches_a_file_through_sys_path():
    """Tools and studies import mmposenc's helpers (:mod:`mmposenc.utils.tools`) and each other
    by name. A tool's one ``sys.path`` edit puts its own checkout's root first (a tool of a
    clone, installed or not, imports that clone's mmposenc:
    ``tests/test_tools/test_tools_as_users_run_them.py``); a study edits none (``python -m``
    from the root)."""
    edits = []
    for folder in ('tools', 'projects'):
        for path in sorted((REPO / folder).rglob('*.py')):
            depth = len(path.relative_to(REPO).parts)
            root = 'osp.realpath(__file__)'
            for _ in range(depth):
                root = f'osp.dirname({root})'
            calls = [node for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                     and ast.unparse(node.func.value) == 'sys.path']
            allowed = f'sys.path.insert(0, {root})' if folder == 'tools' else None
            edits += [f'{path.relative_to(REPO)}:{c.lineno}: {ast.unparse(c)}' for c in calls
                      if ast.unparse(c) != allowed]
            assert len(calls) <= 1, path
    assert edits == []
