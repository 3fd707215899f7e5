"""The result of one doctor check, and how a list of them is printed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    required: bool
    """A failed required check makes `rowbus doctor` exit non-zero; others are warnings."""
    detail: str = ""
    consequence: str = ""
    fix: str = ""

    @property
    def verdict(self) -> str:
        if self.ok:
            return "PASS"
        return "FAIL" if self.required else "WARN"


def print_section(title: str, checks: Iterable[Check], out: TextIO) -> None:
    print(title, file=out)
    for check in checks:
        print(f"  {check.verdict}  {check.name}: {check.detail}", file=out)
        if not check.ok:
            print(f"        consequence: {check.consequence}", file=out)
            print(f"        to change:   {check.fix}", file=out)
