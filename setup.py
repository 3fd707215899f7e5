"""The native parts of rowbus: the reader's fast row decoder (`rowbus.producer._rows`), the
snapshot's result-set reader (`rowbus.producer.snapshot._resultset`) and the apply job's SQL
literal renderer (`rowbus.spark_apply._literals`).

Everything else is in pyproject.toml. The extensions are optional at build time: without a C
compiler the install still succeeds and the reader decodes rows, the snapshot reads results,
the apply job renders literals, in pure Python (the same records and text, slower);
`tests/integration/producer/test_fastpath.py`, `tests/integration/snapshot/test_resultset.py`
and `tests/unit/spark_apply/test_rendered.py` fail then, so CI notices.
"""

from setuptools import Extension, setup

# The growable output buffer `_rows.c` and `_literals.c` share (one header, no library).
SHARED = {"include_dirs": ["native"], "depends": ["native/rowbus_buffer.h"]}

setup(
    ext_modules=[
        Extension(
            "rowbus.producer._rows",
            sources=["producer/_rows.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
            **SHARED,
        ),
        Extension(
            "rowbus.producer.snapshot._resultset",
            sources=["producer/snapshot/_resultset.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        ),
        Extension(
            "rowbus.spark_apply._literals",
            sources=["spark_apply/_literals.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
            **SHARED,
        ),
    ]
)
