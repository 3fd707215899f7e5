"""The three native extensions compiled with the sanitizers into ``.fuzz/build`` (never the
venv's own build): ``python -m benchmarks.fuzz build``."""

from __future__ import annotations

import os
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository (benchmarks/fuzz/build.py is two levels down)."""
OUT = ROOT / ".fuzz"
BUILD = OUT / "build"
COVERAGE_SHIM = Path(__file__).with_name("_coverage.c")

SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
"""ASan and UBSan; any UB report aborts (a test or a fuzz run must fail on it, not log it)."""
CFLAGS = [
    *SANITIZE,
    "-fno-omit-frame-pointer",
    "-g",
    "-O1",  # ASan's advice: reports stay exact, runs stay fast enough to fuzz
    "-std=c11",
    "-Wall",
    "-Werror",
    "-fPIC",
    "-shared",
]
COVERAGE = ["-fsanitize-coverage=trace-pc"]


@dataclass(frozen=True)
class Extension:
    module: str
    source: str

    def target(self) -> Path:
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        return BUILD / f"{self.module.rsplit('.', 1)[1]}{suffix}"


SHARED_HEADER = Path("native/rowbus_buffer.h")
"""The header `_rows.c` and `_literals.c` include (setup.py's include_dirs)."""

EXTENSIONS = (
    Extension("rowbus.producer._rows", "producer/_rows.c"),
    Extension("rowbus.producer.snapshot._resultset", "producer/snapshot/_resultset.c"),
    Extension("rowbus.spark_apply._literals", "spark_apply/_literals.c"),
)


def sanitizer_runtime() -> str:
    """gcc's ASan runtime, which must be loaded first (LD_PRELOAD) into an unsanitized Python."""
    path = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        raise RuntimeError(f"gcc has no ASan runtime here (it answered {path!r})")
    return path


def build(source_root: Path = ROOT, force: bool = False) -> list[Path]:
    """Compiles what changed since the last build (every extension with `force`); `source_root`
    lets a fix be checked against an older tree's sources. Returns the built files."""
    BUILD.mkdir(parents=True, exist_ok=True)
    include = sysconfig.get_paths()["include"]
    built = []
    for ext in EXTENSIONS:
        src = source_root / ext.source
        out = ext.target()
        inputs = (src, source_root / SHARED_HEADER, COVERAGE_SHIM, Path(__file__))
        stale = not out.exists() or any(p.stat().st_mtime > out.stat().st_mtime for p in inputs)
        if force or stale or source_root != ROOT:
            # The extension proper gets the coverage callbacks; the shim that counts them not.
            includes = [f"-I{include}", f"-I{(source_root / SHARED_HEADER).parent}"]
            cmd = ["gcc", *CFLAGS, *COVERAGE, *includes, str(src), "-c", "-o", f"{out}.o"]
            subprocess.run([c for c in cmd if c != "-shared"], check=True)
            shim = ["gcc", *CFLAGS, "-c", str(COVERAGE_SHIM), "-o", f"{out}.cov.o"]
            subprocess.run([c for c in shim if c != "-shared"], check=True)
            link = ["gcc", *SANITIZE, "-shared", f"{out}.o", f"{out}.cov.o", "-o", str(out)]
            subprocess.run(link, check=True)
            Path(f"{out}.o").unlink()
            Path(f"{out}.cov.o").unlink()
        built.append(out)
    return built


def environment() -> dict[str, str]:
    """The environment of a Python process that loads the sanitized build."""
    env = dict(os.environ)
    # libstdc++ too, loaded before ASan initializes: atheris reports a Python exception in a
    # target by a C++ throw, and ASan's __cxa_throw interceptor aborts when libstdc++ was not
    # there to resolve the real one at its start.
    env["LD_PRELOAD"] = f"{sanitizer_runtime()} libstdc++.so.6"
    # Leaks: CPython keeps objects alive until exit by design. abort_on_error: the report is
    # followed by SIGABRT, which every runner sees as a failure.
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    # Every Python object malloc'd, so ASan sees a read of a freed one (pymalloc would reuse).
    env["PYTHONMALLOC"] = "malloc"
    env["ROWBUS_SANITIZED_BUILD"] = str(BUILD)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env
