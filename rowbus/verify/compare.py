"""Compare one target table with the union of the upstream tables that feed it (sync-diff style).

Chunks are cut on the target's keys; for each chunk the target's checksum is compared with the
XOR-combined checksum of every shard. Only a chunk that differs is fetched row by row, to list
the keys that are missing, extra or different.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rowbus.exceptions import VerifyError
from rowbus.verify.checksum import (
    Chunk,
    Key,
    TableRef,
    all_rows,
    boundaries,
    checksum,
    columns,
    primary_key,
    rows,
)


@dataclass
class TableDiff:
    target: str
    shards: list[str]
    source_rows: int = 0
    target_rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    missing: list[Key] = field(default_factory=list)
    """Keys upstream but not in the target."""
    extra: list[Key] = field(default_factory=list)
    """Keys in the target but in no shard."""
    different: list[Key] = field(default_factory=list)
    duplicated: list[Key] = field(default_factory=list)
    """Keys present in more than one shard: a merge cannot hold both."""
    differences: int = 0
    """Every differing key, including those beyond the listed `max_keys` per kind."""
    error: str | None = None

    @property
    def equal(self) -> bool:
        return self.differences == 0 and self.error is None


def compare_table(
    target: TableRef, shards: Sequence[TableRef], chunk_rows: int = 10_000, max_keys: int = 100
) -> TableDiff:
    diff = TableDiff(str(target), [str(s) for s in shards])
    cols = columns(target)
    if not cols:
        diff.error = "the target table does not exist"
        return diff
    for shard in shards:
        shard_cols = columns(shard)
        missing_cols = [
            c for c, own in zip(cols, shard.physical(cols), strict=True) if own not in shard_cols
        ]
        if missing_cols:
            raise VerifyError(
                f"{shard} has no column for {missing_cols} of {target}; check the route's "
                "include, exclude and rename"
            )
    key = primary_key(target)
    if not key:
        _compare_keyless(diff, target, shards, cols, max_keys)
        return diff
    for chunk in boundaries(target, key, chunk_rows):
        diff.chunks += 1
        t_count, t_sum = checksum(target, key, cols, chunk)
        s_count, s_sum = 0, 0
        for shard in shards:
            count, crc = checksum(shard, key, cols, chunk)
            s_count += count
            s_sum ^= crc
        diff.target_rows += t_count
        diff.source_rows += s_count
        if (t_count, t_sum) == (s_count, s_sum):
            continue
        diff.chunks_differing += 1
        _diff_rows(diff, target, shards, key, cols, chunk, max_keys)
    return diff


def _compare_keyless(
    diff: TableDiff, target: TableRef, shards: Sequence[TableRef], cols: list[str], max_keys: int
) -> None:
    """A table without a primary key (PROTOCOL.md §9.3) as one chunk: rows are compared as a
    multiset (equal rows may repeat), and listed by their values where the counts differ."""
    whole = Chunk(None, None)
    diff.chunks = 1
    t_count, t_sum = checksum(target, [], cols, whole, combine="SUM")
    s_count, s_sum = 0, 0
    for shard in shards:
        count, crc = checksum(shard, [], cols, whole, combine="SUM")
        s_count += count
        s_sum += crc
    diff.target_rows, diff.source_rows = t_count, s_count
    if (t_count, t_sum) == (s_count, s_sum):
        return
    diff.chunks_differing = 1
    upstream = Counter(r for shard in shards for r in all_rows(shard, cols))
    downstream = Counter(all_rows(target, cols))
    for values in sorted((upstream - downstream).elements(), key=repr):
        _add(diff, diff.missing, values, max_keys)
    for values in sorted((downstream - upstream).elements(), key=repr):
        _add(diff, diff.extra, values, max_keys)


def _diff_rows(
    diff: TableDiff,
    target: TableRef,
    shards: Sequence[TableRef],
    key: list[str],
    cols: list[str],
    chunk: Chunk,
    max_keys: int,
) -> None:
    upstream: dict[Key, tuple[object, ...]] = {}
    for shard in shards:
        for k, values in rows(shard, key, cols, chunk).items():
            if k in upstream:
                _add(diff, diff.duplicated, k, max_keys)
            upstream[k] = values
    downstream = rows(target, key, cols, chunk)
    for k in sorted(upstream.keys() - downstream.keys(), key=repr):
        _add(diff, diff.missing, k, max_keys)
    for k in sorted(downstream.keys() - upstream.keys(), key=repr):
        _add(diff, diff.extra, k, max_keys)
    for k in sorted(upstream.keys() & downstream.keys(), key=repr):
        if upstream[k] != downstream[k]:
            _add(diff, diff.different, k, max_keys)


def _add(diff: TableDiff, keys: list[Key], key: Key, limit: int) -> None:
    diff.differences += 1
    if len(keys) < limit:
        keys.append(key)
