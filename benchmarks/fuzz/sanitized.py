"""Makes ``import rowbus.producer._rows`` (and the two others) load the sanitized build named
by ``$ROWBUS_SANITIZED_BUILD``: a finder ahead of the editable install's.

Imported by `benchmarks.fuzz.worker` and, as a pytest plugin (``-p benchmarks.fuzz.sanitized``),
by `python -m benchmarks.fuzz unit`, before anything imports rowbus."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from benchmarks.fuzz.build import EXTENSIONS


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        file = self.files.get(fullname)
        if file is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(file))
        return importlib.util.spec_from_file_location(fullname, file, loader=loader)


def install() -> dict[str, Path]:
    """Puts the finder first; raises when the build is missing (a run must not quietly test
    the normal build)."""
    build = os.environ.get("ROWBUS_SANITIZED_BUILD")
    if not build:
        raise RuntimeError("ROWBUS_SANITIZED_BUILD is not set: use python -m benchmarks.fuzz")
    files = {}
    for ext in EXTENSIONS:
        file = Path(build) / ext.target().name
        if not file.exists():
            raise RuntimeError(f"{file} is missing: python -m benchmarks.fuzz build")
        files[ext.module] = file
    if any(m in sys.modules for m in files):
        raise RuntimeError("a native module was imported before the sanitized build's finder")
    sys.meta_path.insert(0, _Finder(files))
    return files


def active() -> bool:
    return any(isinstance(f, _Finder) for f in sys.meta_path)


def files() -> dict[str, Path]:
    """The module → file map of the installed finder."""
    for f in sys.meta_path:
        if isinstance(f, _Finder):
            return f.files
    raise RuntimeError("the sanitized build's finder is not installed")


def loaded() -> dict[str, str]:
    """Each native module's file, as imported (the sanitized ones, once `install` ran)."""
    import rowbus.producer.fastrows
    import rowbus.producer.snapshot.resultset
    import rowbus.spark_apply.rendered

    modules = (
        rowbus.producer.fastrows._BUILT,
        getattr(rowbus.producer.snapshot.resultset, "_resultset"),  # noqa: B009
        getattr(rowbus.spark_apply.rendered, "_native"),  # noqa: B009
    )
    return {m.__name__: str(m.__file__) for m in modules}


def pytest_configure() -> None:
    """As a pytest plugin: no hypothesis deadline. The sanitized process runs several times
    slower (every allocation through ASan's malloc), which is not what a deadline is about."""
    from hypothesis import settings

    settings.register_profile("sanitized", deadline=None)
    settings.load_profile("sanitized")


def pytest_report_header() -> list[str]:
    """As a pytest plugin: the files the native modules were loaded from, which must be the
    sanitized build's (a run that quietly tested the normal build would prove nothing)."""
    files = loaded()
    build = os.environ["ROWBUS_SANITIZED_BUILD"]
    for name, file in files.items():
        if Path(file).parent != Path(build):
            raise RuntimeError(f"{name} was loaded from {file}, not from {build}")
    return [f"sanitized: {file}" for file in files.values()]


if os.environ.get("ROWBUS_SANITIZED_BUILD") and not active():
    install()
