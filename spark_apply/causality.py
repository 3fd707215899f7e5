"""Key conflicts inside one step: which touched rows must be written together (pure).

A step is collapsed to the last image per primary key (`rowbus.spark_apply.changes`). That is
only safe to write key by key when no two touched rows share a value of another UNIQUE key of
the target: when a unique value moves from one row to another (or two rows swap values), an
``INSERT … ON DUPLICATE KEY UPDATE`` of one row meets the other row's *old* value still in the
sink — MySQL then updates that other row (a row lost without an error) or fails with 1062 on
every replay.

As in TiDB-DM's causality, the keys of every image a row passes through in the step (its
primary key, and the value of each unique key without a NULL) join a union-find: rows that
share a key value are one group. Values are compared as the sink compares them
(`rowbus.spark_apply.keys`): under a ``_ci`` collation 'x' and 'X' are one unique value, and a
row taking 'X' while another gives up 'x' is a conflict like any other. A group of one row is
written as before; the rows of a larger group are all deleted by primary key first, then
inserted with their last images. The last images of a step are an upstream state (a step ends
at a transaction boundary), so once the group's old rows are gone they cannot conflict with
each other or with rows the step did not touch; and since a step is one sink transaction
(snapshot mode), readers never see the rows in between. In parallel mode a group is one
shard, so no two shards race for one unique value.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence

from rowbus.protocol.values import Value
from rowbus.spark_apply.keys import Fold, sink_key
from rowbus.spark_apply.literals import is_null

Key = tuple[Value, ...]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, x: Hashable) -> Hashable:
        parent = self.parent
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while x != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: Hashable, b: Hashable) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def owners(skeletons: dict[Key, Key], groups: Sequence[Sequence[Key]]) -> dict[Key, Key]:
    """Per key, the skeleton (`keys.sink_key`) that picks its writer: its own, or for a key whose
    skeleton a member of a group has, the one skeleton of the whole group. Keys the sink calls
    equal already share a skeleton; a group joins its members' skeletons, so every key of
    every member's class is written by one writer."""
    if not groups:
        return skeletons
    uf = _UnionFind()
    for group in groups:
        first = skeletons[group[0]]
        for key in group[1:]:
            uf.union(first, skeletons[key])
    return {key: uf.find(s) for key, s in skeletons.items()}  # type: ignore[misc]


def unique_positions(
    columns: Sequence[str], unique_keys: Iterable[Sequence[str]]
) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """(n, positions in `columns`) of each unique key ``unique_keys[n]`` whose columns are all
    there (a key with a column the route filters out cannot be checked; the sink then reports
    its conflicts). `n` names the key whatever columns an image has."""
    index = {c.lower(): i for i, c in enumerate(columns)}
    out = []
    for n, key in enumerate(unique_keys):
        pos = [index.get(c.lower()) for c in key]
        if key and all(p is not None for p in pos):
            out.append((n, tuple(p for p in pos if p is not None)))
    return tuple(out)


def conflict_groups(
    images: dict[Key, list[tuple[tuple[str, ...], tuple[Value, ...]]]],
    unique_keys: Sequence[Sequence[str]],
    folds: Callable[[Sequence[str]], tuple[Fold, ...]] = lambda columns: (),
) -> list[list[Key]]:
    """Groups of more than one primary key whose images share a unique key value.

    `images`: per primary key, in first-touch order, every (columns, values) image the step
    has of it (before and after images), values as SQL literals (`changes.collapse` renders
    them: NULL is ``NULL``). `folds`: how the sink compares each column of a unique key
    (`keys.fold_of`; by default as text, which is coarse, so safe). Groups come out in
    first-touch order of their first member, members in first-touch order.
    """
    if not unique_keys or len(images) < 2:
        return []
    uf = _UnionFind()
    owner: dict[Hashable, Key] = {}
    positions: dict[tuple[str, ...], tuple[tuple[int, tuple[int, ...]], ...]] = {}
    key_folds = [folds(k) for k in unique_keys]
    for key, seen in images.items():
        uf.find(("pk", key))
        for columns, values in seen:
            where = positions.get(columns)
            if where is None:
                where = positions[columns] = unique_positions(columns, unique_keys)
            for n, pos in where:
                value = tuple(values[p] for p in pos)
                if any(is_null(v) for v in value):  # type: ignore[arg-type]
                    continue  # NULLs never conflict in a unique key
                token = ("uk", n, sink_key(value, key_folds[n]))  # type: ignore[arg-type]
                first = owner.setdefault(token, key)
                if first != key:
                    uf.union(("pk", first), ("pk", key))
    groups: dict[Hashable, list[Key]] = {}
    for key in images:
        groups.setdefault(uf.find(("pk", key)), []).append(key)
    return [g for g in groups.values() if len(g) > 1]
