"""The import directions of DESIGN.md's layout table, checked on the source (no imports run).

A component imports only the components it depends on, plus the client seams (`rowbus.clients`,
which sit below every component and import only `rowbus.protocol`); nothing anywhere imports the
root folders as top-level modules (they install only under the `rowbus` namespace); foreign
clients are built only in their seam.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("protocol", "producer", "consumers", "spark_apply")
# component -> the rowbus.* subpackages it may import (besides itself)
ALLOWED = {
    "protocol": set(),
    "producer": {"protocol", "clients"},
    "consumers": {"protocol", "clients"},
    "spark_apply": {"protocol", "consumers", "clients"},
}
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
    if len(parts) > 1 and parts[1] in (*COMPONENTS, "clients"):
        return parts[1]
    return "shell"


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
    "Consumer(": "rowbus/clients/kafka.py",
    "Producer(": "rowbus/clients/kafka.py",
    "AdminClient(": "rowbus/clients/kafka.py",
    "pymysql.connect(": "rowbus/clients/mysql.py",
    "KazooClient(": "rowbus/clients/zookeeper.py",
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


def test_the_client_seams_import_no_component() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in sorted((ROOT / "rowbus" / "clients").glob("*.py"))
        for line, module in _imports(path)
        if _target(module) not in (None, "protocol") and not module.startswith("rowbus.clients")
    ]
    assert not bad, "\n".join(bad)
