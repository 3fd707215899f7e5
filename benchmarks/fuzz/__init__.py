"""The native extensions under AddressSanitizer and UndefinedBehaviorSanitizer, and fuzzed.

    python -m benchmarks.fuzz build            # .fuzz/build/: the three extensions, sanitized
    python -m benchmarks.fuzz unit [pytest args]   # their unit suites against that build
    python -m benchmarks.fuzz run --seconds N  # each target N s (atheris, libFuzzer's engine)

`build` compiles `producer/_rows.c`, `producer/snapshot/_resultset.c` and
`spark_apply/_literals.c` with gcc and ``-fsanitize=address,undefined -fno-omit-frame-pointer
-g`` into ``.fuzz/build/`` (the venv's normal build is never touched). `unit` and `run` start
Python with the sanitizer runtime preloaded (``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``,
``ASAN_OPTIONS=detect_leaks=0``: CPython leaks by design; ``PYTHONMALLOC=malloc`` so that
Python objects are malloc'd and a stale pointer into one is seen) and a finder that resolves
the three module names to the sanitized files (`sanitized.py`).

`unit` is, spelled out (from the repository, after `build`):

    LD_PRELOAD="$(gcc -print-file-name=libasan.so) libstdc++.so.6" \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 PYTHONMALLOC=malloc \
    ROWBUS_SANITIZED_BUILD=.fuzz/build PYTHONPATH=. \
    .venv/bin/python -m pytest -p benchmarks.fuzz.sanitized --capture=sys -q \
        tests/unit/producer tests/unit/spark_apply tests/unit/native

(libstdc++ is preloaded so that ASan finds the real `__cxa_throw`, which atheris throws
through; ``--capture=sys`` leaves fd 2 alone, where a sanitizer's report goes as the process
dies; the plugin also checks that the three modules came from .fuzz/build and lifts
hypothesis's deadline.)

`run` runs one libFuzzer process per target (`targets.py`: one per extension, its input's first
byte choosing the entry point), seeded from encodings of the unit tests' corpora (`seeds.py`),
and prints each one's executions, corpus size and any crash, its input saved under
``.fuzz/crashes/``. The extensions are built with gcc's ``-fsanitize-coverage=trace-pc`` and
their edges fed to libFuzzer as extra counters (`_coverage.c`), so the search is guided by the
C code's coverage, not only the harness's.
"""
