"""The configuration reference (docs/configuration.md) is the settings models' own: every
setting is in it with a description, and nothing is in it that is not a setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rowbus.reference import DOC, reference, settings

ROOT = Path(__file__).resolve().parents[3]


def test_every_setting_has_a_description() -> None:
    missing = [s.path for s in settings() if not s.description]
    assert missing == [], f"settings without a docstring: {missing}"


def test_the_checked_in_reference_is_the_generated_one() -> None:
    """Regenerate with ``rowbus config reference > docs/configuration.md``."""
    assert (ROOT / DOC).read_text(encoding="utf-8") == reference()


def test_the_reference_names_every_setting_once_and_no_other() -> None:
    text = (ROOT / DOC).read_text(encoding="utf-8")
    named = [line.split("`")[1] for line in text.splitlines() if line.startswith("| `")]
    assert named == [s.path for s in settings()]
    assert len(set(named)) == len(named)
    assert "reader.online_ddl" in named and "apply.mode" in named  # a few known ones


def test_rowbus_config_reference_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rowbus", "config", "reference"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out == reference()
