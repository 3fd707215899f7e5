"""One fuzz target in this process: ``python -m benchmarks.fuzz.worker TARGET [libFuzzer args]``,
started by `benchmarks.fuzz.run` with the sanitized build's environment."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

from benchmarks.fuzz import sanitized


def _register_coverage(core: Path, extensions: list[str]) -> int:
    """Hands each sanitized extension's block counters (`_coverage.c`) to the libFuzzer that
    atheris loaded; returns how many counters. dlsym on libFuzzer's own handle: a global lookup
    would find the ASan runtime's weak stubs of the same names first."""
    fuzzer = ctypes.CDLL(str(core))
    total = 0
    for file in extensions:
        ext = ctypes.CDLL(file)
        counters = ctypes.c_void_p()
        pcs = ctypes.c_void_p()
        n = ctypes.c_int()
        ext.rowbus_fuzz_counters(ctypes.byref(counters), ctypes.byref(pcs), ctypes.byref(n))
        start = counters.value or 0
        fuzzer.__sanitizer_cov_8bit_counters_init(
            ctypes.c_void_p(start), ctypes.c_void_p(start + n.value)
        )
        table = pcs.value or 0
        size = ctypes.sizeof(ctypes.c_void_p)
        fuzzer.__sanitizer_cov_pcs_init(
            ctypes.c_void_p(table), ctypes.c_void_p(table + 2 * size * n.value)
        )
        total += n.value
    return total


def main() -> None:
    import atheris  # after the sanitizer runtime is loaded (LD_PRELOAD by run.py)

    name, args = sys.argv[1], sys.argv[2:]
    files = sanitized.install() if not sanitized.active() else sanitized.files()
    # No atheris.instrument_imports: its Python coverage reaches libFuzzer through the global
    # __sanitizer_cov_* symbols, which the preloaded ASan runtime's stubs shadow (atheris warns
    # so at start). The guidance is the C code's own coverage, registered below by handle.
    from benchmarks.fuzz import targets

    target = targets.TARGETS["canary" if name.startswith("canary") else name]
    loaded = sanitized.loaded()
    for module, file in loaded.items():
        if Path(file) != files[module]:
            raise RuntimeError(f"{module} was loaded from {file}, not the sanitized build")
    atheris.Setup([sys.argv[0], *args], target)
    core = Path(atheris.__file__).parent
    libfuzzer = next(core.glob("core_with_libfuzzer*.so"))
    count = _register_coverage(libfuzzer, sorted(loaded.values()))
    print(f"rowbus-fuzz: {name}: {count} C block counters registered", flush=True)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
