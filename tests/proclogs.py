"""The logs of the processes a test starts, shown in that test's failure report.

Readers, nodes and jobs that tests start write stdout and stderr to a file under the test's
tmp_path. When one crashed (a reader segfaulted once, before its first log line, in a
clean-clone run), the file was gone with the tmp folder and the report showed only the test's
own assertion. A helper that starts a process calls `keep(log, what)`; if the test fails, the
report gets one section per log: its tail, and a faulthandler dump ("Fatal Python error") in
full wherever it is in the file. Processes inherit PYTHONFAULTHANDLER=1 (conftest), so a native
crash writes its Python stacks there.
"""

from __future__ import annotations

from pathlib import Path

TAIL_CHARS = 6000
"""Of each log: enough for a traceback and the lines before it, not a whole run's log."""
DUMP_CHARS = 12000

_kept: list[tuple[str, Path]] = []


def keep(log: Path, what: str) -> None:
    """Show `log` (a process's output file) in the current test's report if it fails."""
    if all(path != log for _, path in _kept):
        _kept.append((what, log))


def clear() -> None:
    """Before each test: the logs of the previous one are not this one's."""
    _kept.clear()


def sections() -> list[tuple[str, str]]:
    """(title, text) for each kept log that exists, as pytest report sections."""
    found = []
    for what, path in _kept:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            found.append((f"log of {what}", f"{path}: unreadable ({exc})"))
            continue
        dump = text.find("Fatal Python error")
        parts = []
        if 0 <= dump < len(text) - TAIL_CHARS:
            parts.append(text[dump : dump + DUMP_CHARS] + "\n[...]\n")
        parts.append(text[-TAIL_CHARS:])
        found.append((f"log of {what} ({path}, last {TAIL_CHARS} chars)", "".join(parts)))
    return found
