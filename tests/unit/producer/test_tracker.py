"""The shadow schema as a state machine: DDLs applied in binlog order, undone on a rewind,
stored as of a checkpoint and restored by a new term (no server: a fake `fetch`)."""

from __future__ import annotations

from dataclasses import replace

from rowbus.producer.ddl.apply import TableDef
from rowbus.producer.tracker import UNKNOWN, Extras, SchemaTracker
from rowbus.protocol.ddl import TableName, parse_ddl
from rowbus.protocol.events import ColumnSchema, TableSchema

T = TableName("d", "t")


def tracker(live: dict[TableName, Extras] | None = None) -> SchemaTracker:
    found = live or {}
    return SchemaTracker(lambda s, t: found.get(TableName(s, t)))


def ddl(tr: SchemaTracker, sql: str, offset: int) -> TableSchema | str | None:
    result = tr.on_ddl(parse_ddl(sql, "d"), sql, (1, "b.000001", offset))
    return result.table if result.known else "unknown"


def test_an_add_column_followed_by_a_modify_keeps_its_own_default() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY, c0 BIGINT)", 100)
    added = ddl(tr, "ALTER TABLE t ADD COLUMN n10 VARCHAR(6) DEFAULT ' éZéca'", 200)
    modified = ddl(tr, "ALTER TABLE t MODIFY n10 VARCHAR(12)", 300)
    assert isinstance(added, TableSchema)
    assert isinstance(modified, TableSchema)
    assert added.columns[-1].default == "' éZéca'"
    assert added.columns[-1].length == 6
    assert modified.columns[-1].default == "NULL"
    assert modified.columns[-1].length == 12


def test_rewind_undoes_what_was_applied_after_the_position() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY)", 100)
    ddl(tr, "ALTER TABLE t ADD COLUMN a INT", 200)
    tr.rewind((1, "b.000001", 150))
    state = tr.state(T)
    assert isinstance(state, TableDef)
    assert [c.name for c in state.columns] == ["id"]
    # Read again from there: the ALTER applies once.
    again = ddl(tr, "ALTER TABLE t ADD COLUMN a INT", 200)
    assert isinstance(again, TableSchema)
    assert again.column_names == ("id", "a")


def test_durable_gives_the_states_as_of_the_checkpoint_and_keeps_later_ones() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY)", 100)
    ddl(tr, "ALTER TABLE t ADD COLUMN a INT", 200)
    stored = tr.durable((1, "b.000001", 150))
    assert [(n, s.column_names if s else None) for n, s in stored] == [(T, ("id",))]
    later = tr.durable((1, "b.000001", 250))
    assert [(n, s.column_names if s else None) for n, s in later] == [(T, ("id", "a"))]
    assert tr.durable((1, "b.000001", 300)) == []


def test_a_new_term_restores_stored_states_and_applies_later_ddls_once() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT 3)", 100)
    stored = dict(tr.durable((1, "b.000001", 100)))
    fresh = tracker({T: Extras({}, (), "latin1_swedish_ci")})
    fresh.restore(stored)
    after = ddl(fresh, "ALTER TABLE t ADD COLUMN b VARCHAR(2) DEFAULT 'x'", 200)
    assert isinstance(after, TableSchema)
    assert [c.default for c in after.columns] == [None, "3", "'x'"]
    assert after.columns[-1].collation == "latin1_swedish_ci"  # the table's, from the server


def test_a_statement_not_modelled_makes_the_table_unknown_until_its_next_table_map() -> None:
    tr = tracker({T: Extras({"id": None, "g": "NULL"}, (), "utf8mb4_general_ci")})
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY)", 100)
    assert ddl(tr, "ALTER TABLE t ADD COLUMN g INT AS (id + 1) VIRTUAL", 200) == "unknown"
    assert tr.state(T) is UNKNOWN
    table_map = TableSchema(
        "d", "t", (ColumnSchema("id", "int", nullable=False), ColumnSchema("g", "int")), ("id",)
    )
    row_schema = tr.on_table_map(table_map, (1, "b.000001", 300))
    assert [c.default for c in row_schema.columns] == [None, "NULL"]
    assert isinstance(tr.state(T), TableDef)


def test_a_table_map_that_disagrees_wins_for_what_it_carries() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY, a INT DEFAULT 5)", 100)
    table_map = TableSchema(
        "d", "t", (ColumnSchema("id", "int", nullable=False), ColumnSchema("a", "bigint")), ("id",)
    )
    row_schema = tr.on_table_map(table_map, (1, "b.000001", 200))
    assert row_schema.columns[1].type == "bigint"
    assert row_schema.columns[1].default == "5"


def test_rename_drop_and_drop_database() -> None:
    tr = tracker()
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY)", 100)
    moved = ddl(tr, "RENAME TABLE t TO u", 200)
    assert isinstance(moved, TableSchema)
    assert moved.table == "u"
    assert tr.state(T) is None
    assert ddl(tr, "DROP TABLE u", 300) is None
    assert tr.state(TableName("d", "u")) is None
    ddl(tr, "CREATE TABLE t (id INT PRIMARY KEY)", 400)
    ddl(tr, "DROP DATABASE d", 500)
    assert tr.state(T) is None


def test_a_table_met_first_in_a_table_map_is_undefined_until_a_term_stores_it() -> None:
    """PROTOCOL.md §9.6: a table known from neither a DDL read nor a stored state needs a
    definition; one a CREATE made does not; a new term that restores the states stored with
    the checkpoint (written in the Kafka transaction of the definition) knows it is defined,
    one whose checkpoint did not store it (a kill -9 before the commit) does not."""
    mapped = TableSchema("d", "old", (ColumnSchema("id", "int", nullable=False),), ("id",))
    made = TableName("d", "new")
    tr = tracker()
    ddl(tr, "CREATE TABLE new (id INT PRIMARY KEY)", 100)
    tr.on_table_map(replace(mapped, table="new"), (1, "b.000001", 150))
    tr.on_table_map(mapped, (1, "b.000001", 200))
    assert tr.undefined == {TableName("d", "old")}
    stored = dict(tr.durable((1, "b.000001", 250)))
    assert made in stored and TableName("d", "old") in stored
    resumed = tracker()
    resumed.restore(stored)
    resumed.on_table_map(mapped, (1, "b.000001", 300))
    assert resumed.undefined == set()
    lost = tracker()
    lost.restore({made: stored[made]})
    lost.on_table_map(mapped, (1, "b.000001", 300))
    assert lost.undefined == {TableName("d", "old")}


def test_json_is_a_type_of_its_own_on_mysql_and_longtext_on_mariadb() -> None:
    """MySQL's table map says json; MariaDB's JSON is LONGTEXT utf8mb4_bin: the interpreter
    reads a CREATE as the source means it, so the tracked schema equals the table map's."""
    from rowbus.producer.ddl.apply import create_table
    from rowbus.producer.ddl.words import MARIADB_CHARSETS, Charsets

    statement = "CREATE TABLE t (id INT PRIMARY KEY, doc JSON)"
    mysql = Charsets({"utf8mb4": "utf8mb4_0900_ai_ci"}, native_json=True)
    mine = create_table(statement, "s", "t", "utf8mb4_0900_ai_ci", mysql).schema_of()
    theirs = create_table(statement, "s", "t", "utf8mb4_general_ci", MARIADB_CHARSETS).schema_of()
    assert (mine.columns[1].type, mine.columns[1].collation) == ("json", None)
    assert (theirs.columns[1].type, theirs.columns[1].collation) == ("longtext", "utf8mb4_bin")


def test_enum_and_set_members_lose_their_trailing_spaces_as_on_the_server() -> None:
    """The server drops a member's trailing spaces when it creates the table, so a table map
    lists ENUM('Ä ') as 'Ä' (the fidelity corpus's enum_latin1, read from the MySQL 8 test
    primary, made the tracker disagree with it): the interpreter drops them too, and only
    trailing spaces."""
    from rowbus.producer.ddl.apply import create_table
    from rowbus.producer.ddl.words import MARIADB_CHARSETS

    statement = "CREATE TABLE t (id INT PRIMARY KEY, e ENUM(' a ','Ä ','b\\t'), s SET('x  ','y'))"
    schema = create_table(statement, "s", "t", "utf8mb4_general_ci", MARIADB_CHARSETS).schema_of()
    assert schema.columns[1].elements == (" a", "Ä", "b\t")
    assert schema.columns[2].elements == ("x", "y")


def test_an_enum_default_with_trailing_spaces_names_its_stripped_member() -> None:
    from rowbus.producer.ddl.apply import create_table
    from rowbus.producer.ddl.words import MARIADB_CHARSETS

    statement = "CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a ','b') DEFAULT 'a ')"
    schema = create_table(statement, "s", "t", "utf8mb4_general_ci", MARIADB_CHARSETS).schema_of()
    assert schema.columns[1].elements == ("a", "b")
    assert schema.columns[1].default == "'a'"
