"""The online-DDL rewrite on the statement sequences gh-ost and pt-osc write (pure)."""

from __future__ import annotations

import pytest

from rowbus.producer.online_ddl import (
    OnlineDdl,
    OnlineDdlError,
    binlog_alters,
    binlog_history,
    is_tool_table,
)
from rowbus.producer.tables import TableFilter
from rowbus.protocol.ddl import TableName, parse_ddl

GH_OST = [
    "create /* gh-ost */ table `d`.`_t_ghc` (id bigint auto_increment, primary key(id))",
    "create /* gh-ost */ table `d`.`_t_gho` like `d`.`t`",
    "alter /* gh-ost */ table `d`.`_t_gho` ADD COLUMN b INT NULL, ADD KEY kb (b)",
    "create /* gh-ost */ table `d`.`_t_del` (id int auto_increment primary key)",
    "drop /* gh-ost */ table if exists `d`.`_t_del`",
    "rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`",
    "drop /* gh-ost */ table if exists `d`.`_t_ghc`",
]
PT_OSC = [
    "CREATE TABLE `d`.`_t_new` LIKE `d`.`t`",
    "ALTER TABLE `d`.`_t_new` ADD COLUMN a INT NULL",
    "CREATE TRIGGER `pt_osc_d_t_ins` AFTER INSERT ON `d`.`t` FOR EACH ROW REPLACE INTO "
    "`d`.`_t_new` (`id`) VALUES (NEW.`id`)",
    "RENAME TABLE `d`.`t` TO `d`.`_t_old`, `d`.`_t_new` TO `d`.`t`",
    "DROP TABLE IF EXISTS `d`.`_t_old`",
]


def run(online: OnlineDdl, statements: list[str], start: int = 0) -> list[str]:
    return [
        online.on_ddl(parse_ddl(s, "d"), s, (1, "b.1", start + i)) for i, s in enumerate(statements)
    ]


@pytest.mark.parametrize(
    ("statements", "cut_over"),
    [
        (GH_OST, "ALTER TABLE `d`.`t` ADD COLUMN b INT NULL, ADD KEY kb (b)"),
        (PT_OSC, "ALTER TABLE `d`.`t` ADD COLUMN a INT NULL"),
    ],
)
def test_the_cut_over_is_the_tools_alter_of_the_real_table(
    statements: list[str], cut_over: str
) -> None:
    out = run(OnlineDdl(), statements)
    changed = [(s, o) for s, o in zip(statements, out, strict=True) if s != o]
    assert changed == [(next(s for s in statements if "rename" in s.lower()), cut_over)]
    # the others touch only the tools' tables: the filter drops them
    tables = TableFilter(tool_table=is_tool_table)
    for s in statements:
        parsed = parse_ddl(s, "d")
        if parsed.tables and s not in dict(changed):
            assert not any(tables.wanted(t.schema, t.table) for t in parsed.touched), s
    assert tables.wanted("d", "t") and TableFilter().wanted("d", "_t_new")


def test_several_alters_of_a_ghost_become_one_statement() -> None:
    online = OnlineDdl()
    out = run(
        online,
        [
            "CREATE TABLE `__t_new` LIKE `t`",
            "ALTER TABLE `__t_new` ADD COLUMN a INT",
            "ALTER IGNORE TABLE `__t_new` DROP COLUMN x",
            "RENAME TABLE `t` TO `__t_old`, `__t_new` TO `t`",
        ],
    )
    assert out[-1] == "ALTER TABLE `d`.`t` ADD COLUMN a INT, DROP COLUMN x"


def test_a_cut_over_without_a_recorded_alter_stops_with_one_line() -> None:
    with pytest.raises(OnlineDdlError, match=r"b\.1:0: .*no ALTER of d\._t_gho was read"):
        run(OnlineDdl(), [GH_OST[5]])
    # an aborted run: its ghost is dropped, a later swap has nothing to apply
    online = OnlineDdl()
    run(online, [*PT_OSC[:2], "DROP TABLE `d`.`_t_new`", PT_OSC[0]])
    with pytest.raises(OnlineDdlError, match=r"no ALTER of d\._t_new"):
        run(online, [PT_OSC[3]], start=10)
    # not a swap of the table and a ghost (gh-ost's two-step cut-over)
    online = OnlineDdl()
    run(online, GH_OST[:3])
    with pytest.raises(OnlineDdlError, match="not a swap of two tables"):
        run(online, ["RENAME TABLE `d`.`_t_gho` TO `d`.`t`"], start=10)


def test_a_new_stream_from_an_earlier_position_reads_the_alter_again() -> None:
    online = OnlineDdl()
    run(online, GH_OST[:3])
    online.rewind((1, "b.1", 1))  # the ALTER (at 2) is undone: read again below
    run(online, GH_OST[2:3], start=2)
    assert run(online, GH_OST[5:6], start=5) == [
        "ALTER TABLE `d`.`t` ADD COLUMN b INT NULL, ADD KEY kb (b)"
    ]
    online.rewind((1, "b.1", 4))  # the cut-over is undone: the ghost's ALTER is back
    assert run(online, GH_OST[5:6], start=5)[0].startswith("ALTER TABLE `d`.`t`")
    online.settled((1, "b.1", 5))
    online.rewind((1, "b.1", 4))  # settled: nothing before it is read again
    with pytest.raises(OnlineDdlError):
        run(online, GH_OST[5:6], start=5)


def test_alters_made_before_the_reader_started_are_read_back_from_the_binlog() -> None:
    ghost = TableName("d", "_t_gho")
    files = {
        "b.1": [(10, "d", "ALTER TABLE _t_gho ADD COLUMN old INT"), (20, "", GH_OST[1])],
        "b.2": [(5, "d", "INSERT INTO x VALUES (1)"), (9, "", GH_OST[2])],
        "b.3": [(7, "", "alter table `d`.`_t_gho` drop key kb"), (50, "", GH_OST[5])],
    }

    def statements(name: str, until: int) -> list[tuple[str, str]]:
        return [(schema, text) for end, schema, text in files[name] if until < 0 or end < until]

    # from the last CREATE of the ghost on; the earlier run's ALTER (before it) is not taken
    assert binlog_alters(ghost, list(files), statements, 50) == [
        GH_OST[2],
        "alter table `d`.`_t_gho` drop key kb",
    ]
    online = OnlineDdl(binlog_history(lambda: list(files), statements))
    # restarted after the first ALTER: the second, read in this term, is not all there is
    drop_key = files["b.3"][0][2]
    assert online.on_ddl(parse_ddl(drop_key, "d"), drop_key, (3, "b.3", 7)) == drop_key
    assert online.on_ddl(parse_ddl(GH_OST[5], "d"), GH_OST[5], (3, "b.3", 50)) == (
        "ALTER TABLE `d`.`t` ADD COLUMN b INT NULL, ADD KEY kb (b), drop key kb"
    )
    # the CREATE purged: nothing to go by
    assert binlog_alters(ghost, ["b.2", "b.3"], statements, 50) is None
    with pytest.raises(OnlineDdlError, match="nor found in the server's binlog"):
        OnlineDdl(binlog_history(lambda: ["b.2", "b.3"], statements)).on_ddl(
            parse_ddl(GH_OST[5], "d"), GH_OST[5], (3, "b.3", 50)
        )
