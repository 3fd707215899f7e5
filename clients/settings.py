"""The strict settings base every component's settings derive from, and the one MySQL
connection type (sources, the sink, the state database all use it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class StrictModel(BaseModel):
    """Unknown keys are refused and values are frozen, so a typo is an error, never ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MySQLConnection(StrictModel):
    """Where a MySQL/MariaDB server answers, and as whom."""

    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str = "rowbus"
    password: SecretStr = SecretStr("rowbus")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def pymysql_kwargs(self) -> dict[str, object]:
        """What mysql-replication's ``connection_settings`` takes (the password revealed)."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password.get_secret_value(),
        }


class ServerAddress(StrictModel):
    """Another server of a source, reached with the source's user and password."""

    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)


class SourceConnection(MySQLConnection):
    """One upstream server a reader tails; `name` keys its topics, checkpoints and election."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    include_schemas: tuple[str, ...] = ()
    """Schema patterns of this source (replaces ``reader.include_schemas``): several sources
    may share one server, each reading its own schemas."""
    replicas: tuple[ServerAddress, ...] = ()
    """Servers holding the same transactions under the same GTIDs (replicas with
    log_slave_updates / log_replica_updates): when the reader loses the server it reads, it
    continues on the first of these (then the others) that answers, by GTID (PROTOCOL.md
    §9.4)."""

    def servers(self) -> list[SourceConnection]:
        """This server, then each replica, as connections of their own."""
        return [
            self.model_copy(update={"replicas": ()}),
            *(
                self.model_copy(update={"host": r.host, "port": r.port, "replicas": ()})
                for r in self.replicas
            ),
        ]
