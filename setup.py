"""The native part of rowbus: the reader's fast row decoder (`rowbus.producer._rows`).

Everything else is in pyproject.toml. The extension is optional at build time: without a C
compiler the install still succeeds and the reader decodes rows in pure Python (the same
records, slower); `tests/integration/producer/test_fastpath.py` fails then, so CI notices.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rowbus.producer._rows",
            sources=["producer/_rows.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        ),
        Extension(
            "rowbus.producer.snapshot._resultset",
            sources=["producer/snapshot/_resultset.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
            optional=True,
        ),
    ]
)
