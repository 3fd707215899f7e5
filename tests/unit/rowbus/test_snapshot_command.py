"""`rowbus snapshot`: what it refuses before it signals (each with one line and exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rowbus.cli import main


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rowbus.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("config", "args", "says"),
    [
        ("sources:\n  - {name: a}\n", ["d.t"], "set reader.signal_topic"),
        (
            "sources:\n  - {name: a}\nreader: {signal_topic: rowbus.control}\n",
            ["t", "d.t.x"],
            "not db.table: t, d.t.x",
        ),
        (
            "sources:\n  - {name: a}\n  - {name: b}\nreader: {signal_topic: rowbus.control}\n",
            ["d.t"],
            "name a source with --source (a, b)",
        ),
    ],
)
def test_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, args: list[str], says: str
) -> None:
    assert main(["-c", _config(tmp_path, config), "snapshot", *args]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and says in out
