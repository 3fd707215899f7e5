"""The conformance kit: check a third party's decoder and merger against the golden vectors.

``python -m rowbus.protocol.conformance [--only records|keys|streams] -- PROGRAM [ARG…]``
starts PROGRAM and talks to it in JSON lines over its stdin and stdout (PROTOCOL.md §10): one
request per line, one answer per line, in order. A decoder in any language is checked without
reading rowbus's code; rowbus's own answers come from ``python -m rowbus.merge.conformance``.

Requests (``value`` is base64 of the record's bytes; ``headers`` maps header names to text):

- ``{"op": "decode", "headers": {…}, "value": "…", "position": "t[0]@5"}`` →
  ``{"record": <the record in the JSON form of §5.3>}``, or ``{"error": "<text>"}`` when the
  value must be refused (the kit sends valid and invalid values);
- ``{"op": "key", "schema": …, "table": …, "values": [JSON values of §4], "partitions": [n…]}``
  → ``{"key": "<the canonical key text>", "murmur2": <int>, "partitions": {"<n>": <p>}}``;
- ``{"op": "schema_id", "table_schema": <a table schema, §1.1 members>}`` →
  ``{"canonical": "<canonical bytes as text>", "schema_id": <int>}``;
- ``{"op": "merge", "lanes": [[topic, partition, source], …], "records": [{"topic",
  "partition", "offset", "headers", "value"}, …]}`` — the records of every partition, each
  partition in offset order, interleaved as a consumer may read them; every source ends
  with a watermark past its last event → ``{"released": [{"source": …, "events": [[file,
  offset, index], …]}, …]}``: every transaction the merge releases (§9), in release order,
  each with its events in order, named by their binlog position and ``txn.index`` (``null``
  for a DDL without a transaction reference). A program that also applies what it releases
  adds ``"tables": {"db.table": [[JSON values of §4], …], …}``: the rows each table holds at
  the end (any order), applied as §9.3, §9.5 and §9.7 say; the kit compares them with the
  vector's ``tables`` when both are there (a table the answer omits counts as empty).

Stream vectors (``testdata/streams/*.json``) hold the merge requests with the release order a
conforming merger gives. ``stream_*`` come from `tests/unit/protocol/streams.py`, whose expected
order is built without the merger (sorted by §9's release order), and cover several sources
and topics, partitions shared by sources, DDLs and snapshot markers on one or every partition,
watermarks, and replayed slices of a lane (a restarted reader, an aborted transaction the
broker leaked). ``named_*`` come from `tests/unit/protocol/named_streams.py`, one case each —
a fragmented transaction, an upstream switch, XA, duplicates of an aborted transaction, DDL
barriers, a keyless table snapshotted in chunks across a reader restart — with an ``about``
line and the final ``tables`` written out by hand.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTDATA = Path(__file__).resolve().parent / "testdata"
STREAMS = TESTDATA / "streams"
PARTS = ("records", "keys", "streams")


@dataclass
class Report:
    """What a run checked and what failed (one line each)."""

    checked: int = 0
    failures: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.failures.append(text)


class Program:
    """The program under test, one request and one answer at a time."""

    def __init__(self, command: Sequence[str]) -> None:
        self._proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the program ended (status {self._proc.wait()}) without answering")
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise RuntimeError(f"the program answered {line.strip()[:200]!r}, not an object")
        return answer

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def record_cases() -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(name, decode request, expected record or None: must be refused) of every record
    vector of the manifest."""
    manifest = json.loads((TESTDATA / "manifest.json").read_text(encoding="utf-8"))
    for v in [*manifest["vectors"], *manifest["versioned"]]:
        request = {
            "op": "decode",
            "headers": v["headers"],
            "value": _b64((TESTDATA / v["file"]).read_bytes()),
            "position": f"vectors[0]@{v['file']}",
        }
        expected = json.loads((TESTDATA / v["expected"]).read_text(encoding="utf-8"))
        yield v["file"], request, expected
    for i, bad in enumerate(manifest["invalid"]):
        request = {
            "op": "decode",
            "headers": bad["headers"],
            "value": _b64(bytes.fromhex(bad["hex"])),
            "position": f"invalid[0]@{i}",
        }
        yield f"invalid {i} ({bad['why']})", request, None


def check_records(program: Program, report: Report) -> None:
    for name, request, expected in record_cases():
        answer = program.ask(request)
        report.checked += 1
        if expected is None:
            if "error" not in answer:
                report.fail(f"{name}: decoded a value it must refuse: {str(answer)[:200]}")
        elif answer.get("record") != expected:
            report.fail(f"{name}: decoded {str(answer)[:300]}, expected {str(expected)[:300]}")


def check_keys(program: Program, report: Report) -> None:
    manifest = json.loads((TESTDATA / "manifest.json").read_text(encoding="utf-8"))
    for k in manifest["keys"]:
        request = {
            "op": "key",
            "schema": k["schema"],
            "table": k["table"],
            "values": k["values"],
            "partitions": [int(n) for n in k["partitions"]],
        }
        answer = program.ask(request)
        report.checked += 1
        want = {"key": k["key"], "murmur2": k["murmur2"], "partitions": k["partitions"]}
        if answer != want:
            report.fail(f"key {k['key']}: answered {answer}, expected {want}")
    for s in manifest["schema_ids"]:
        table = json.loads(s["canonical"])
        answer = program.ask({"op": "schema_id", "table_schema": table})
        report.checked += 1
        want = {"canonical": s["canonical"], "schema_id": s["schema_id"]}
        if answer != want:
            report.fail(f"schema id of {table['schema']}.{table['table']}: {answer}, not {want}")


def check_streams(program: Program, report: Report) -> None:
    for path in sorted(STREAMS.glob("*.json")):
        vector = json.loads(path.read_text(encoding="utf-8"))
        request = {"op": "merge", "lanes": vector["lanes"], "records": vector["records"]}
        answer = program.ask(request)
        report.checked += 1
        got, want = answer.get("released"), vector["released"]
        if got == want:
            _check_tables(path.name, vector, answer, report)
            continue
        if not isinstance(got, list):
            report.fail(f"{path.name}: answered {str(answer)[:200]}")
            continue
        first = next(
            (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
            min(len(got), len(want)),
        )
        report.fail(
            f"{path.name}: {len(got)} transactions released, {len(want)} expected; the first "
            f"difference at #{first}: {got[first] if first < len(got) else None} instead of "
            f"{want[first] if first < len(want) else None}"
        )


def _check_tables(
    name: str, vector: dict[str, Any], answer: dict[str, Any], report: Report
) -> None:
    """The final tables, when the vector has them and the program answered some."""
    want, got = vector.get("tables"), answer.get("tables")
    if want is None or got is None:
        return
    report.checked += 1
    if not isinstance(got, dict):
        report.fail(f"{name}: tables answered as {str(got)[:200]}, not an object")
        return
    for table in sorted(set(want) | set(got)):
        mine = sorted(got.get(table) or [], key=lambda r: json.dumps(r, sort_keys=True))
        if mine != want.get(table, []):
            report.fail(
                f"{name}: table {table} holds {str(mine)[:300]}, "
                f"expected {str(want.get(table, []))[:300]}"
            )
            return


CHECKS = {"records": check_records, "keys": check_keys, "streams": check_streams}


def run(command: Sequence[str], parts: Sequence[str] = PARTS) -> Report:
    """Check the program `command` on `parts` of the kit."""
    report = Report()
    program = Program(command)
    try:
        for part in parts:
            CHECKS[part](program, report)
    except (RuntimeError, ValueError) as exc:  # it died, or answered with no JSON line
        report.fail(f"{' '.join(command)}: {exc}")
    finally:
        program.close()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rowbus.protocol.conformance",
        description="check a decoder and merger against rowbus's vectors (PROTOCOL.md §10)",
    )
    parser.add_argument("--only", action="append", choices=PARTS, help="check only these parts")
    parser.add_argument("command", nargs="+", help="the program to check, after --")
    args = parser.parse_args(argv)
    report = run(args.command, args.only or PARTS)
    for line in report.failures:
        print(f"FAIL {line}")
    print(f"{report.checked} checks, {len(report.failures)} failed")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
