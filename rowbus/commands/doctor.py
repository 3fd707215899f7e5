"""`rowbus doctor`."""

from __future__ import annotations

import argparse

from rowbus.config import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="probe the broker and the source servers and say which guarantees hold "
        "(exit 1 if one the platform relies on does not)",
    )
    only = doctor.add_mutually_exclusive_group()
    only.add_argument("--kafka-only", action="store_true", help="probe only the broker")
    only.add_argument(
        "--mysql-only", action="store_true", help="probe only the source servers and the sink"
    )
    doctor.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace, settings: Settings) -> int:
    from rowbus.doctor import run_doctor

    return run_doctor(settings, kafka_only=args.kafka_only, mysql_only=args.mysql_only)
