"""Faults injected at an Iceberg commit of the sink, for the tests of kill -9 and conflicts.

Unset (always, outside tests), `armed` returns the catalog untouched. With
``ROWBUS_ICEBERG_FAULT=<action>:<n>`` in the environment, the `n`-th commit of this process
that carries a rowbus step (its snapshot summary names the job, batch and step) meets:

- ``kill-before-commit``: SIGKILL of the process after the commit's data files, manifests and
  manifest list are written and before the catalog is asked to commit them (the files stay,
  referenced by nothing: orphans);
- ``kill-after-commit``: SIGKILL right after the catalog committed (the state database has not
  recorded the step: a restart replays it);
- ``compact-before-commit`` (counting the commits to current-state tables only): the table
  compacted by another catalog client
  (`iceberg_maintenance.Maintenance.compact`) just before the commit goes to the catalog, so
  the commit's base is stale and the catalog refuses it (a conflict with a running
  compaction, made deterministic).

Each fires once per process, and logs a WARNING line first.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from rowbus.clients.faults import fault_spec
from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.iceberg_catalog import BATCH, JOB, STEP

log = logging.getLogger(__name__)

ENV = "ROWBUS_ICEBERG_FAULT"
ACTIONS = ("kill-before-commit", "kill-after-commit", "compact-before-commit")


def armed(catalog: Any) -> Any:
    """`catalog`, its ``commit_table`` wrapped when ``ROWBUS_ICEBERG_FAULT`` asks for a fault."""
    try:
        parsed = fault_spec(ENV, ACTIONS)
    except ValueError as exc:
        raise ApplyError(str(exc)) from None
    if parsed is None:
        return catalog
    spec, action, at = parsed
    commit = catalog.commit_table
    seen = [0]

    def commit_table(table: Any, requirements: Any, updates: Any) -> Any:
        current = bool(table.schema().identifier_field_ids)
        if not _steps(updates) or (action == "compact-before-commit" and not current):
            return commit(table, requirements, updates)
        seen[0] += 1
        if seen[0] != at:
            return commit(table, requirements, updates)
        where = f"{'.'.join(table.name())} commit {at} ({_steps(updates)[0]})"
        if action == "kill-before-commit":
            log.warning("%s=%s: SIGKILL before %s", ENV, spec, where)
            os.kill(os.getpid(), signal.SIGKILL)
        if action == "compact-before-commit":
            from pyiceberg.catalog import load_catalog

            from rowbus.spark_apply.iceberg_maintenance import Maintenance

            other = load_catalog(catalog.name, **catalog.properties)
            ident = table.name()
            files = Maintenance(other).compact((".".join(ident[:-1]), ident[-1]), min_files=1)
            log.warning("%s=%s: compacted before %s: %s", ENV, spec, where, files)
        response = commit(table, requirements, updates)
        if action == "kill-after-commit":
            log.warning("%s=%s: SIGKILL after %s", ENV, spec, where)
            os.kill(os.getpid(), signal.SIGKILL)
        return response

    catalog.commit_table = commit_table
    return catalog


def _steps(updates: Any) -> list[str]:
    """The rowbus marks of the snapshots a commit adds, as job/batch/step texts."""
    from pyiceberg.table.update import AddSnapshotUpdate

    found = []
    for update in updates:
        if isinstance(update, AddSnapshotUpdate) and update.snapshot.summary is not None:
            props = update.snapshot.summary.additional_properties
            if JOB in props:
                found.append(f"{props[JOB]} batch {props[BATCH]} step {props[STEP]}")
    return found
