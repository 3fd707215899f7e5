"""The import directions of the layout, checked on the source (no imports run).

The layout, from the bottom up (each folder at the repository root is one package, installed as
`rowbus.<folder>` through a link in `rowbus/`; README.md's "Layout" section draws it)::

    protocol      the wire: events, codecs, partitioner, topics        imports nothing of ours
    clients       the seams around foreign clients                     protocol
    merge         the merge engine (merger, positions, checkpoints,    protocol
                  transactions, spill, its state)
    routing       upstream tables to targets, column filters           protocol, clients, merge
    shard_ddl     shard-DDL coordination over the control topic        protocol, clients, merge
    producer      the binlog reader (and its DDL interpreter)          protocol, clients
    consumers     the Subscriber SDK                                   + merge, routing, shard_ddl
    spark_apply   the Spark apply job                                  + merge, routing, shard_ddl
    rowbus/       the application shell (CLI, config, local stack)     everything

A component imports only the components below it that it depends on; nothing anywhere imports
the root folders as top-level modules (they install only under the `rowbus` namespace); foreign
clients are built only in their seam; every package's `__init__` map (the components' and the
shell's) names exactly its modules.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = (
    "protocol",
    "clients",
    "merge",
    "routing",
    "shard_ddl",
    "producer",
    "consumers",
    "spark_apply",
)
_DEPENDS = re.compile(r"^Depends on: (.*)\.$", re.MULTILINE)


def _depends_on(component: str) -> set[str]:
    """The components `component` may import, as its package map's "Depends on:" line says:
    the map is the rule, so it cannot go stale against what is enforced."""
    doc = ast.get_docstring(ast.parse((ROOT / component / "__init__.py").read_text())) or ""
    found = _DEPENDS.findall(doc)
    assert len(found) == 1, f"{component}/__init__.py: one 'Depends on: ...' line, not {found}"
    return set(re.findall(r"`(\w+)`", found[0]))


ALLOWED = {component: _depends_on(component) for component in COMPONENTS}
"""component -> the rowbus.* components it may import (besides itself)."""
TOP_LEVEL = set(COMPONENTS)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            if node.module == "rowbus":
                out += [(node.lineno, f"rowbus.{alias.name}") for alias in node.names]
    return out


def _files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "_generated" not in p.parts)


def _target(module: str) -> str | None:
    """The rowbus part a module name belongs to: a component, 'shell', or None (foreign)."""
    parts = module.split(".")
    if parts[0] != "rowbus":
        return None
    if len(parts) > 1 and parts[1] in COMPONENTS:
        return parts[1]
    return "shell"


def test_the_components_depend_on_each_other_in_layers() -> None:
    """The maps' dependencies form layers (no circle): protocol at the bottom, then clients,
    the engine (merge, routing, shard_ddl), then the producer and the two consumers."""
    placed: list[str] = []
    left = dict(ALLOWED)
    while left:  # each round places at least one component, or there is a circle
        ready = sorted(c for c, deps in left.items() if deps <= set(placed))
        assert ready, f"the components' 'Depends on' lines form a circle: {left}"
        placed += ready
        for c in ready:
            del left[c]
    assert placed[0] == "protocol", placed
    assert set(ALLOWED["spark_apply"]) | set(ALLOWED["consumers"]) <= {
        "protocol",
        "clients",
        "merge",
        "routing",
        "shard_ddl",
    }, "the apply job and the Subscriber SDK share the engine, never each other or the producer"


@pytest.mark.parametrize("component", COMPONENTS)
def test_a_component_imports_only_what_it_depends_on(component: str) -> None:
    bad = []
    for path in _files(component):
        for line, module in _imports(path):
            target = _target(module)
            if target is None or target == component:
                continue
            if target not in ALLOWED[component]:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(
    "folder", [*COMPONENTS, "rowbus", "tests", "benchmarks"], ids=lambda f: f"{f}/"
)
def test_nothing_imports_a_component_as_a_top_level_module(folder: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _files(folder)
        if not path.is_symlink()
        for line, module in _imports(path)
        if module.split(".")[0] in TOP_LEVEL
    ]
    assert not bad, "\n".join(bad)


def test_the_namespace_links_point_at_the_root_folders() -> None:
    for name in COMPONENTS:
        link = ROOT / "rowbus" / name
        assert link.is_symlink() and link.resolve() == (ROOT / name).resolve(), link


SEAMS = {
    "Consumer(": "clients/kafka.py",
    "Producer(": "clients/kafka.py",
    "AdminClient(": "clients/kafka.py",
    "pymysql.connect(": "clients/mysql.py",
    "KazooClient(": "clients/zookeeper.py",
}


def _calls(call: str) -> re.Pattern[str]:
    """`Consumer(` as a bare name (not `.Consumer(` or `MyConsumer(`); dotted calls as written."""
    return re.compile(("" if "." in call else r"(?<![\w.])") + re.escape(call))


def _package_files() -> list[Path]:
    files = [p for folder in (*COMPONENTS, "benchmarks") for p in _files(folder)]
    return files + [p for p in _files("rowbus") if p.parent.name not in COMPONENTS]


@pytest.mark.parametrize("call", sorted(SEAMS))
def test_foreign_clients_are_built_only_in_their_seam(call: str) -> None:
    seam = ROOT / SEAMS[call]
    bad = []
    for path in _package_files():
        if path.resolve() == seam.resolve():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _calls(call).search(line.split("#", 1)[0]):
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, f"{call} outside {SEAMS[call]}:\n" + "\n".join(bad)


_TABLE_ENTRY = re.compile(r"^ {4}([A-Za-z_][\w]*)(\.py|\.c|/)\s")
_BULLET = re.compile(r"^- (.*?):\s")
_NAME = re.compile(r"`([\w.]+)`")


def _packages() -> list[Path]:
    """Every package of the components and of the shell (`rowbus/` without its links)."""
    inits = [init for folder in COMPONENTS for init in (ROOT / folder).rglob("__init__.py")]
    inits += [
        init
        for init in (ROOT / "rowbus").rglob("__init__.py")
        if init.relative_to(ROOT / "rowbus").parts[0] not in COMPONENTS
    ]
    return sorted(init.parent for init in inits if "_generated" not in init.parts)


def _members(package: Path) -> set[str]:
    """Modules and subpackages a map must name (private `_x` ones and `__main__` aside)."""
    out = set()
    for child in package.iterdir():
        if child.name.startswith("_"):
            continue
        if child.suffix == ".py" or (child / "__init__.py").exists():
            out.add(child.stem)
    return out


def _map_entries(package: Path) -> set[str]:
    """The names a package's ``__init__`` docstring lists as its map: lines of an indented
    table (``    name.py  what``, ``    name/  what``) or bullets (``- `name`, `other`: what``,
    dotted names by their last part)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    names: set[str] = set()
    for line in doc.splitlines():
        entry = _TABLE_ENTRY.match(line)
        if entry:
            if entry.group(2) != ".c":
                names.add(entry.group(1))
            continue
        bullet = _BULLET.match(line)
        if bullet:
            names.update(n.rsplit(".", 1)[-1] for n in _NAME.findall(bullet.group(1)))
    return names


@pytest.mark.parametrize("package", _packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_map_is_true_and_complete(package: Path) -> None:
    entries = _map_entries(package)
    members = _members(package)
    assert not members - entries, f"{package.relative_to(ROOT)}/__init__.py leaves out " + str(
        sorted(members - entries)
    )
    assert not entries - members, (
        f"{package.relative_to(ROOT)}/__init__.py names "
        + str(sorted(entries - members))
        + ", which do not exist"
    )


@pytest.mark.parametrize("package", _packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_declares_all(package: Path) -> None:
    tree = ast.parse((package / "__init__.py").read_text())
    has_code = any(isinstance(n, ast.ImportFrom | ast.Import) for n in tree.body)
    names = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert not has_code or "__all__" in names, (
        f"{package.relative_to(ROOT)} re-exports without __all__"
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["rowbus", *parts])


def _load_time_imports(path: Path, modules: set[str]) -> set[str]:
    """The rowbus modules `path` imports when it is loaded: module-level imports, not those
    under ``if TYPE_CHECKING`` nor the lazy ones inside functions; `from pkg import mod`
    counts as importing ``pkg.mod``."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for item in node.body if isinstance(node, ast.Try) else [node]:
            if isinstance(item, ast.Import):
                found |= {alias.name for alias in item.names}
            elif isinstance(item, ast.ImportFrom) and item.module and item.level == 0:
                found.add(item.module)
                found |= {f"{item.module}.{a.name}" for a in item.names}
    return found & modules


def test_no_two_modules_import_each_other() -> None:
    """No import circle among the components' modules (issue #30 found `spark_apply.sink` and
    `shard_writes` importing each other). A package's own `__init__`, which a submodule's
    import runs first anyway, is not counted as a dependency of its submodules."""
    paths = {_module_name(p): p for c in COMPONENTS for p in _files(c)}
    modules = set(paths)
    graph = {
        name: {
            m
            for m in _load_time_imports(path, modules)
            if m != name and not name.startswith(m + ".")
        }
        for name, path in paths.items()
    }
    circles = []
    for start in sorted(graph):
        # Depth-first from each module, bounded by the graph's size: a path back to `start`
        # is a circle (reported once, from its smallest module).
        stack = [(start, (start,))]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    if start == min(trail):
                        circles.append(" -> ".join([*trail, start]))
                elif nxt not in seen and nxt > start:
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    assert not circles, "\n".join(circles)


LONGEST_CLASS = 400
"""Lines a class of the components or the shell may take (issue #30): a longer one has more
than one job; split it along them."""


def test_no_class_is_longer_than_the_bound() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {size} lines"
        for folder in (*COMPONENTS, "rowbus")
        for path in _files(folder)
        if not path.is_symlink()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ClassDef)
        and (size := (node.end_lineno or node.lineno) - node.lineno + 1) > LONGEST_CLASS
    ]
    assert not long, "\n".join(long)
