"""Which write task owns a sink row: a hash of its target and of its key as the sink sees it.

Pure. Two rows the sink holds as one must be written by one task in one step, or their
writes race in two transactions in any order (issue 31: under a ``_ci`` collation 'c' and 'C'
are one row; under PAD SPACE 'a' and 'a ' are; under ``utf8mb4_general_ci`` 'ß' and 's').
So the hash is over the key's *skeleton* under the sink's collations, `keys.sink_key` — the
one implementation of "the key the sink's collation sees", the one collapse, causality and
parallel mode's shards use: keys the sink calls equal have equal skeletons, hence one owner.
Two keys with one skeleton that the sink calls distinct only share a task, which costs
parallelism, never a row: ownership never decides identity, the sink does.

The folds are the target's key columns' (`keys.fold_of` of the sink's column collations),
looked up by the driver from the sink (`MySQLSink.target_folds`) and shipped to the
executors with the batch; a target the sink does not describe yet is not keyed here (the
batch goes to the driver's path, `throughput.read_and_key`).

The hash is crc32, not Python's `hash` (salted per process): every executor, every attempt and
every replay must place a key in the same task.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from rowbus.spark_apply.keys import Fold, sink_key

_SEP = "\x1f"


def owner(target: str, key: Sequence[str], folds: Sequence[Fold] = ()) -> int:
    """The owner hash of a target's row by its key literals under the `folds` of the key's
    columns in the sink (`keys.sink_key`; an empty key: the whole table)."""
    skeleton = sink_key(key, folds) if key else ()
    text = target + _SEP + _SEP.join(skeleton)
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))
