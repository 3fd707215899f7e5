"""`rowbus doctor` names every upstream setting under which a value could not be reproduced
(MySQL 8 settings checked from their variables: no MySQL 8 server runs here)."""

from __future__ import annotations

from rowbus.doctor.mysql import value_checks

MYSQL8_OK = {
    "binlog_row_value_options": "",
    "binlog_transaction_compression": "OFF",
}


def _failed(variables: dict[str, str]) -> dict[str, str]:
    return {c.name: c.detail for c in value_checks(variables) if not c.ok}


def test_a_mysql8_server_with_whole_values_and_no_compression_passes() -> None:
    assert _failed(MYSQL8_OK) == {}
    assert _failed({}) == {}  # a server without these settings (MariaDB lacks the MySQL ones)


def test_partial_json_is_reported_as_supported_with_a_full_before_image() -> None:
    variables = {**MYSQL8_OK, "binlog_row_value_options": "PARTIAL_JSON"}
    assert _failed(variables) == {}
    passed = {c.name: c.detail for c in value_checks(variables) if c.ok}
    assert passed["binlog_row_value_options PARTIAL_JSON or empty"] == (
        "is PARTIAL_JSON: JSON diffs are applied to the before image (needs binlog_row_image=FULL)"
    )


def test_transaction_compression_is_reported_as_supported() -> None:
    variables = {**MYSQL8_OK, "binlog_transaction_compression": "ON"}
    assert _failed(variables) == {}
    passed = {c.name: c.detail for c in value_checks(variables) if c.ok}
    detail = passed["binlog_transaction_compression ON or OFF"]
    assert detail == "is ON: compressed events are decoded"


def test_mariadb_old_temporal_format_is_refused_and_binlog_compression_is_supported() -> None:
    failed = _failed({"log_bin_compress": "ON", "mysql56_temporal_format": "OFF"})
    assert set(failed) == {"mysql56_temporal_format=ON"}
    passed = {c.name: c.detail for c in value_checks({"log_bin_compress": "ON"}) if c.ok}
    assert passed["log_bin_compress ON or OFF"] == "is ON: compressed events are decoded"
