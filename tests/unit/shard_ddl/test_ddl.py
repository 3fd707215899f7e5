"""Retargeting, normalising and classifying shard DDL statements."""

from __future__ import annotations

import pytest

from rowbus.shard_ddl.ddl import compatible, coordinated, normalize, retarget, widens
from rowbus.shard_ddl.exceptions import DdlTextError


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("ALTER TABLE orders_3 ADD c INT", "ALTER TABLE `shop`.`orders` ADD c INT"),
        (
            "alter table `db1`.`orders_3` add column c int",
            "alter table `shop`.`orders` add column c int",
        ),
        (
            "ALTER ONLINE IGNORE TABLE IF EXISTS db1 . orders_3 DROP c;",
            "ALTER ONLINE IGNORE TABLE IF EXISTS `shop`.`orders` DROP c",
        ),
        (
            "CREATE UNIQUE INDEX i_c ON orders_3 (c)",
            "CREATE UNIQUE INDEX i_c ON `shop`.`orders` (c)",
        ),
        ("DROP INDEX IF EXISTS i_c ON db.orders_3", "DROP INDEX IF EXISTS i_c ON `shop`.`orders`"),
        (
            "/* c */ ALTER TABLE t ADD d VARCHAR(8) DEFAULT 'orders_3'",
            "/* c */ ALTER TABLE `shop`.`orders` ADD d VARCHAR(8) DEFAULT 'orders_3'",
        ),
    ],
)
def test_retarget_replaces_only_the_table_name(statement: str, expected: str) -> None:
    assert retarget(statement, "shop", "orders") == expected


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE t (a INT)",
        "DROP TABLE t",
        "TRUNCATE t",
        "RENAME TABLE a TO b",
        "GRANT ALL ON *.* TO x",
        "ALTER DATABASE d CHARSET utf8mb4",
    ],
)
def test_only_alter_and_index_ddl_is_coordinated(statement: str) -> None:
    assert not coordinated(statement)
    with pytest.raises(DdlTextError):
        retarget(statement, "s", "t")


def test_spellings_of_one_ddl_normalise_equal() -> None:
    spellings = [
        "ALTER TABLE orders_1 ADD COLUMN note VARCHAR(32) DEFAULT 'x y'",
        "alter   table `src`.`orders_2`\n add column `note` varchar (32) default 'x y';",
        "ALTER TABLE orders_3 /* hi */ ADD COLUMN NOTE VARCHAR( 32 ) DEFAULT 'x y'",
    ]
    keys = {normalize(retarget(s, "shop", "orders")) for s in spellings}
    assert keys == {"ALTER TABLE SHOP.ORDERS ADD COLUMN NOTE VARCHAR(32) DEFAULT 'x y'"}


def test_different_ddls_normalise_different() -> None:
    a = normalize(retarget("ALTER TABLE t1 MODIFY c BIGINT", "s", "t"))
    b = normalize(retarget("ALTER TABLE t2 MODIFY c DECIMAL(20,0)", "s", "t"))
    c = normalize(retarget("ALTER TABLE t3 ADD d INT DEFAULT 'A'", "s", "t"))
    d = normalize(retarget("ALTER TABLE t3 ADD d INT DEFAULT 'a'", "s", "t"))
    assert len({a, b}) == 2
    assert c != d, "string literals keep their case"


@pytest.mark.parametrize(
    ("statement", "types", "ok"),
    [
        ("ALTER TABLE t ADD c INT", None, True),
        ("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 0", None, True),
        ("ALTER TABLE t ADD COLUMN c INT NOT NULL", None, False),
        ("ALTER TABLE t ADD c INT, ADD d INT", None, False),
        ("ALTER TABLE t ADD INDEX i (c)", None, False),
        ("ALTER TABLE t DROP COLUMN c", None, False),
        ("ALTER TABLE t MODIFY c BIGINT", {"C": "INT(11)"}, True),
        ("ALTER TABLE t MODIFY c SMALLINT", {"C": "INT(11)"}, False),
        ("ALTER TABLE t MODIFY c BIGINT", None, False),
        ("ALTER TABLE t MODIFY COLUMN v VARCHAR(64)", {"V": "VARCHAR(32)"}, True),
        ("ALTER TABLE t CHANGE v w VARCHAR(64)", {"V": "VARCHAR(32)"}, False),
        ("ALTER TABLE t MODIFY d DECIMAL(14,2)", {"D": "DECIMAL(12,2)"}, True),
        ("ALTER TABLE t MODIFY d DECIMAL(14,4)", {"D": "DECIMAL(12,2)"}, True),
        ("ALTER TABLE t MODIFY d DECIMAL(13,4)", {"D": "DECIMAL(12,2)"}, False),
    ],
)
def test_compatible_statements_for_optimistic_mode(
    statement: str, types: dict[str, str] | None, ok: bool
) -> None:
    assert compatible(normalize(statement), types) is ok


def test_widens_keeps_signedness() -> None:
    assert widens("INT UNSIGNED", "BIGINT UNSIGNED")
    assert not widens("INT UNSIGNED", "BIGINT")
    assert not widens("VARCHAR(10)", "INT")
