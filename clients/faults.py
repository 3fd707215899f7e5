"""The one reading of a test-only fault hook's environment variable (``<action>:<count>``).

The reader (`rowbus.producer.faults`), the apply job (`rowbus.spark_apply.apply_faults`) and
the Iceberg sink (`rowbus.spark_apply.iceberg_faults`) each kill their own process at an exact
point when their variable is set; unset, as always outside tests, nothing is armed. Each wraps
the refusal in its own component's error."""

from __future__ import annotations

import os
from collections.abc import Collection


def fault_spec(env: str, actions: Collection[str], unit: str = "n") -> tuple[str, str, int] | None:
    """(the variable's value, its action, its count) when `env` is set, else None; a value
    that is not ``<action>:<unit>`` with a known action and a count >= 1 raises `ValueError`
    in one line naming the variable."""
    spec = os.environ.get(env)
    if not spec:
        return None
    action, _, count = spec.partition(":")
    if action not in actions or not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"{env}={spec!r}: expected <action>:<{unit}> with action one of "
            f"{', '.join(actions)} and {unit} >= 1; unset it outside tests"
        )
    return spec, action, int(count)
