"""Throughput mode's write-task collapse over the Arrow rows, without a Python object per row.

A write task (`throughput.write_owned`) holds its released rows as Arrow record batches of
`throughput.BUNDLE_SCHEMA` (`row`: op, schema id, before-image length and the images' SQL
literals, `SEP`-joined). `collapsed` does what `changes.collapse_images` does for them — the
merger's release order (ts, source, order key, part), the last change of each key, deletes
and upserts per target — with pyarrow compute kernels: the order is a stable
`sort_indices`, each key's last row a hash aggregate, each row's statement item (its key
literal, or its projected literals as ``(l1,l2,…)``, `literals.row_of_literals`) joined from
the split text by column index. Python touches each final row once, as the one string the
statement joins (`literals.chunks`), so the statements are those `table_writes.write_table`
builds from `collapse_images`' changes, row for row (the items' order within a statement may
differ: one row per key, so it is not observable).

It answers None — the caller collapses the rows one by one as before — whenever the one
collapse has more to do than "last change per key": a table without a key, with another
unique key or generated columns, a key literal that is a quoted string under a collation
that folds it (`keys.sink_key`: 'c' and 'C' are one row to the sink, and collapse then
clears one before the other), a row whose schema is unknown or whose image does not have
its schema's width (the one collapse raises, naming it), more than `_MAX_BYTES` of row
text. Equal to the one collapse on
generated rows: `tests/unit/spark_apply/test_arrow_collapse.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rowbus.protocol.events import Op, TableSchema
from rowbus.routing.exceptions import RoutingError
from rowbus.routing.routes import Projection, Router, Target
from rowbus.spark_apply.keys import Fold
from rowbus.spark_apply.literals import SEP, chunks

_DELETE, _OLD_KEY = Op.DELETE.value, 1
"""An op's text in the rows, and `throughput.OLD_KEY` (the delete half of a key move)."""
_MAX_BYTES = 1 << 30
"""The task's row texts the Arrow path takes at most (their split fields are one array)."""
_IMAGES = 3
"""Fields of a row's text before its images (op, schema id, before-image length)."""


@dataclass(slots=True)
class Bulk:
    """One target's last changes: the items of its DELETE and upsert statements."""

    target: Target
    key_columns: tuple[str, ...]
    columns: tuple[str, ...]
    deletes: list[str] = field(default_factory=list)
    """Per deleted key its literal (one key column) or ``(l1,l2,…)``."""
    upserts: list[str] = field(default_factory=list)
    """Per upserted key its row's projected literals as ``(l1,l2,…)``."""

    def statements(self, max_bytes: int) -> Iterable[tuple[str, bool]]:
        """(statement, is an upsert): the deletes first, as `write_table` orders them."""
        from rowbus.spark_apply.changes import delete_statements, upsert_statements

        # Heads and tails from the one renderer: what two one-item statements share.
        one = len(self.key_columns) == 1
        deletes = [
            next(delete_statements(self.target, self.key_columns, [[m]], rendered=True))
            for m in _MARKERS
        ]
        del_head, del_tail = _frame(deletes, 0 if one else 1)
        upserts = [
            next(
                upsert_statements(self.target, self.columns, self.key_columns, [[m]], rendered=True)
            )
            for m in _MARKERS
        ]
        up_head, up_tail = _frame(upserts, 1)
        for sql in chunks(del_head, del_tail, self.deletes, max_bytes):
            yield sql, False
        for sql in chunks(up_head, up_tail, self.upserts, max_bytes):
            yield sql, True

    def __len__(self) -> int:
        return len(self.deletes) + len(self.upserts)


_MARKERS = ("\x01", "\x02")
"""Two one-character items: the statements around them differ only there."""


def _frame(pair: list[str], around: int) -> tuple[str, str]:
    """(head, tail) of two one-item statements that differ only in their item, the item's
    `around` characters on each side (a tuple's parentheses) left to the items."""
    a, b = pair
    at = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
    return a[: at - around], a[at + 1 + around :]


def collapsed(
    batches: Sequence[Any],
    schemas: Callable[[int], TableSchema | None],
    router: Router,
    unique_keys: Callable[[Target], Sequence[Sequence[str]]],
    generated: Callable[[Target], frozenset[str]],
    folds: Callable[[Target], Mapping[str, Fold]],
) -> list[Bulk] | None:
    """The last change of each key of the released `batches` (`BUNDLE_SCHEMA` record
    batches) per target, or None: the one collapse must take them (module docstring)."""
    import numpy as np

    if not batches or not sum(b.num_rows for b in batches):
        return []
    if sum(b.column(b.schema.names.index("row")).nbytes for b in batches) > _MAX_BYTES:
        return None  # one string array holds them all: its 32-bit offsets must not overflow
    rows = _Split.of(batches)
    bulks: list[Bulk] = []
    by_target: dict[Target, int] = {}
    pieces: list[tuple[Any, int, Any, Any]] = []  # (positions, target index, keys, items)
    for schema_id in np.unique(rows.sid).tolist():
        at = np.flatnonzero(rows.sid == schema_id)
        table = schemas(schema_id)
        proj = _projection(table, router, unique_keys, generated)
        if proj is None:
            continue  # no route takes the table: collapse skips its rows
        if isinstance(proj, str) or table is None or not rows.fit(at, len(table.columns)):
            return None
        found = rows.piece(at, proj, len(table.columns), folds(proj.target))
        if found is None:
            return None
        if proj.target not in by_target:
            by_target[proj.target] = len(bulks)
            bulks.append(Bulk(proj.target, proj.key_columns, proj.columns))
        pieces.append((at, by_target[proj.target], *found))
    if pieces:
        _fill(bulks, pieces, rows)
    return bulks


@dataclass(slots=True)
class _Split:
    """A task's rows in release order: per row its op, schema id, before-image length and
    images' text (numpy and Arrow arrays, one entry per row). Texts are cut only where a
    field is needed (split kernels with a bound), not into every field of every row."""

    op: Any
    n: Any
    sid: Any
    deleting: Any
    """The row deletes its key: a delete, or the old key's half of a key move."""
    images: Any
    """The images' text: the before image's literals, then the after image's."""
    fields: Any
    """Literals in `images`."""

    @staticmethod
    def of(batches: Sequence[Any]) -> _Split:
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        table = pa.Table.from_batches(batches)
        order = pc.sort_indices(
            table, [(c, "ascending") for c in ("ts", "source", "okey", "part")]
        )  # stable: equal rows keep their read order, as the one collapse's sort does
        head = pc.split_pattern(
            table.column("row").take(order).combine_chunks(), SEP, max_splits=_IMAGES
        )
        parts = table.column("part").take(order).combine_chunks()

        def numbers(array: Any) -> Any:
            return pc.cast(array, pa.int64()).to_numpy(zero_copy_only=False)

        op = pc.list_element(head, 0)
        images = pc.list_element(head, _IMAGES)
        return _Split(
            op,
            numbers(pc.list_element(head, 2)),
            numbers(pc.list_element(head, 1)),
            np.logical_or(
                pc.equal(op, _DELETE).to_numpy(zero_copy_only=False),
                parts.to_numpy(zero_copy_only=False) == _OLD_KEY,
            ),
            images,
            numbers(pc.count_substring(images, SEP)) + 1,
        )

    def fit(self, at: Any, width: int) -> bool:
        """Whether the rows `at` have images of their schema's `width` (as `changes.project`
        checks): a before image of `width` or none (n = -1, not on a delete), an after image
        of `width` except on a delete."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        deleted = pc.equal(self.op.take(pa.array(at)), _DELETE).to_numpy(zero_copy_only=False)
        n = self.n[at]
        expected = np.maximum(n, 0) + np.where(deleted, 0, width)
        before = (n == width) | ((n == -1) & ~deleted)
        return bool(np.all(before & (self.fields[at] == expected)))

    def piece(
        self, at: Any, proj: Projection, width: int, folds: Mapping[str, Fold]
    ) -> tuple[Any, Any] | None:
        """(key text, statement item or null) of each of the rows `at` of one schema; None
        when a key is text under a collation that folds it (collapse must clear the keys
        it joins)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        # The image each row's key is read from, from its first literal on: a delete's
        # before image (the images' start), an upsert's after image (past the before image
        # when it has one).
        image = self.images.take(pa.array(at))
        past = np.flatnonzero(~self.deleting[at] & (self.n[at] >= 0))
        if len(past):
            after = pc.list_element(
                pc.split_pattern(image.take(pa.array(past)), SEP, max_splits=width), width
            )
            image = pc.if_else(_mask(len(at), past), _scatter(len(at), past, after), image)
        keys = []
        for p in proj.key_positions:
            column = proj.indexes[p]
            literal = pc.list_element(pc.split_pattern(image, SEP, max_splits=column + 1), column)
            fold = folds.get(proj.columns[p].lower(), Fold.TEXT)
            if fold is not Fold.EXACT and pc.any(pc.starts_with(literal, "'")).as_py():
                return None
            keys.append(literal)
        key = keys[0] if len(keys) == 1 else pc.binary_join_element_wise(*keys, SEP)
        upserting = np.flatnonzero(~self.deleting[at])
        items = pa.nulls(len(at), pa.string())
        if len(upserting):
            after = image.take(pa.array(upserting))
            if proj.indexes == tuple(range(width)):  # the whole image, in its order
                joined = pc.replace_substring(after, SEP, ",")
            else:
                literals = pc.split_pattern(after, SEP)
                joined = pc.binary_join_element_wise(
                    *(pc.list_element(literals, i) for i in proj.indexes), ","
                )
            row = pc.binary_join_element_wise("(", joined, ")", "")
            items = _scatter(len(at), upserting, row)
        return key, items


def _fill(bulks: list[Bulk], pieces: list[tuple[Any, int, Any, Any]], rows: _Split) -> None:
    """Each (target, key)'s last row into its target's deletes or upserts, in release order."""
    import numpy as np
    import pyarrow as pa

    positions = np.concatenate([p[0] for p in pieces])
    targets = np.concatenate([np.full(len(p[0]), p[1], np.int32) for p in pieces])
    keys = pa.concat_arrays([p[2] for p in pieces])
    items = pa.concat_arrays([p[3] for p in pieces])
    last = np.sort(
        pa.table({"t": targets, "k": keys, "pos": positions})
        .group_by(["t", "k"], use_threads=False)
        .aggregate([("pos", "max")])
        .column("pos_max")
        .to_numpy()
    )  # sorted: the release order, as the one collapse meets each key's last change
    where = np.empty(len(rows.sid), np.int64)
    where[positions] = np.arange(len(positions))
    final = pa.array(where[last])
    for t, deleted, k, item in zip(
        targets[final].tolist(),
        rows.deleting[last].tolist(),
        keys.take(final).to_pylist(),
        items.take(final).to_pylist(),
        strict=True,
    ):
        bulk = bulks[t]
        if not deleted:
            bulk.upserts.append(item)
        elif len(bulk.key_columns) == 1:
            bulk.deletes.append(k)
        else:
            bulk.deletes.append("(" + k.replace(SEP, ",") + ")")


def _projection(
    table: TableSchema | None,
    router: Router,
    unique_keys: Callable[[Target], Sequence[Sequence[str]]],
    generated: Callable[[Target], frozenset[str]],
) -> Projection | str | None:
    """A schema's projection when its rows need no more than the last change per key; None
    when no route takes it; a reason text when the one collapse must take the rows."""
    if table is None:
        return "an unknown schema id"
    try:
        proj = router.projection(table)
    except RoutingError:
        return "bad routing"
    if proj is None:
        return None
    mine = {c.lower() for c in proj.key_columns}
    if proj.keyless or any({c.lower() for c in k} != mine for k in unique_keys(proj.target)):
        return "keyless or another unique key"
    if generated(proj.target):
        return "generated columns"
    return proj


def _mask(length: int, at: Any) -> Any:
    """A boolean array of `length`, true at the positions `at`."""
    import numpy as np
    import pyarrow as pa

    mask = np.zeros(length, bool)
    mask[at] = True
    return pa.array(mask)


def _scatter(length: int, at: Any, values: Any) -> Any:
    """An array of `length` holding `values` at the positions `at` (sorted), null elsewhere."""
    import numpy as np
    import pyarrow as pa

    index = np.full(length, -1, np.int64)
    index[at] = np.arange(len(at))
    missing = index < 0
    return values.take(pa.array(np.where(missing, 0, index), mask=missing))


def write_bulks(cur: Any, bulks: list[Bulk], max_bytes: int) -> int | None:
    """Write `bulks` on `cur`; the rows written, or None when the sink refused an upsert as
    truncated data (the ENUM error value a STRICT sink refuses, `enum_error`): the caller
    writes the rows the one way then, which handles it (each statement here is idempotent,
    and the refused one changed nothing)."""
    import pymysql

    from rowbus.spark_apply.enum_error import ER_DATA_TRUNCATED
    from rowbus.spark_apply.sink_conn import room_for

    for bulk in bulks:
        with room_for(cur, bulk.target):
            for sql, upsert in bulk.statements(max_bytes):
                try:
                    cur.execute(sql)
                except pymysql.err.MySQLError as exc:
                    if upsert and exc.args and exc.args[0] == ER_DATA_TRUNCATED:
                        return None
                    raise
    return sum(len(b) for b in bulks)
