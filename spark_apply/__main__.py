"""``python -m rowbus.spark_apply --config job.json``, or ``spark-submit …/__main__.py …``.

The JSON file is a `JobConfig` (``rowbus apply`` writes one from rowbus' configuration).
Exit status: 0 when an ``available_now`` run has caught up, 2 when an event cannot be applied
(the message names its position and the reason), 1 on any other failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from rowbus.spark_apply.exceptions import ApplyError
from rowbus.spark_apply.settings import JobConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rowbus.spark_apply", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="a JobConfig JSON file")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    config = JobConfig.model_validate(json.loads(args.config.read_text()))
    from rowbus.spark_apply.job import run

    stopped: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        # Unwinds `run`, whose finally stops the query and the Spark session; a batch cut
        # short is not committed and runs again on restart (exactly once in the sink).
        if stopped:
            return
        stopped.append(signum)
        raise JobStopped(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        run(config)
    except JobStopped as exc:
        logging.getLogger("rowbus.spark_apply").warning("apply stopped by signal %d", exc.signum)
        return 128 + exc.signum
    except ApplyError as exc:
        logging.getLogger("rowbus.spark_apply").error("apply stopped: %s", exc)
        return 2
    except Exception as exc:
        if stopped:  # the stop interrupted a call into Spark mid-way
            logging.getLogger("rowbus.spark_apply").warning(
                "apply stopped by signal %d (%s)", stopped[0], type(exc).__name__
            )
            return 128 + stopped[0]
        cause = _apply_error_in(exc)
        if cause is not None:
            logging.getLogger("rowbus.spark_apply").error("apply stopped: %s", cause)
            return 2
        raise
    return 0


class JobStopped(Exception):  # noqa: N818 - a stop request, not a failure
    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _apply_error_in(exc: BaseException) -> str | None:
    """Spark wraps a foreachBatch failure in its own exception; find ours in the message."""
    text = str(exc)
    for name in ("BadEventError", "CheckpointConflictError", "ApplyError"):
        if name in text:
            line = next((ln for ln in text.splitlines() if name in ln), text)
            return line.strip()
    return None


if __name__ == "__main__":
    sys.exit(main())
