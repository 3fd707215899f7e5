"""The throttling proxy (`tests/faults/proxy.py`) over a loopback echo server: the round trip
it adds, and a byte rate per connection that several connections do not share."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.proxy import Proxy, Throttle


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()
    stop.set()
    thread.join(5)
    server.close()


def exchange(port: int, size: int) -> float:
    """Seconds to send `size` bytes through the proxy and read them back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        started = time.perf_counter()
        conn.sendall(b"x" * size)
        got = 0
        while got < size:
            got += len(conn.recv(65536))
        return time.perf_counter() - started


def test_a_round_trip_costs_the_rtt_and_bytes_the_rate_per_connection(
    echo: tuple[str, int],
) -> None:
    proxy = Proxy(echo, Throttle(rtt_s=0.05, bytes_per_s=200_000))
    try:
        assert 0.05 <= exchange(proxy.port, 10) < 0.5
        # 100 KB each way at 200 KB/s: 0.5 s a direction, the two overlapped as on a network.
        assert 0.5 <= exchange(proxy.port, 100_000) < 1.6
        # Four connections at once each get the whole rate: about as long as one (one rate
        # shared by the four would take 2 s at least).
        took: list[float] = []
        threads = [
            threading.Thread(target=lambda: took.append(exchange(proxy.port, 100_000)))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(took) == 4 and max(took) < 1.6
    finally:
        proxy.close()


def test_lag_slows_an_open_connection_both_ways_until_it_is_lifted(
    echo: tuple[str, int],
) -> None:
    proxy = Proxy(echo)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:

            def round_trip() -> float:
                started = time.perf_counter()
                conn.sendall(b"ping")
                assert conn.recv(65536) == b"ping"
                return time.perf_counter() - started

            assert round_trip() < 0.2
            # Added on the connection already open (a reader's binlog stream is one such):
            # 0.1 s each way, so a round trip costs 0.2 s at least, and no byte is lost.
            proxy.lag(0.1)
            assert 0.2 <= round_trip() < 1.0
            proxy.lag(0)
            assert round_trip() < 0.2
    finally:
        proxy.close()


def test_lifting_the_lag_releases_a_piece_held_under_it_at_once(
    echo: tuple[str, int],
) -> None:
    # A lag past a client's session timeout (the nemesis's lag-zookeeper) ends at the heal:
    # the piece held under a 30 s lag comes through as soon as the lag is lifted.
    proxy = Proxy(echo)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:
            proxy.lag(30)
            started = time.perf_counter()
            conn.sendall(b"held")
            conn.settimeout(0.5)
            with pytest.raises(TimeoutError):
                conn.recv(65536)  # held: nothing back yet
            proxy.lag(0)
            conn.settimeout(10)
            assert conn.recv(65536) == b"held"
            assert time.perf_counter() - started < 5.0
    finally:
        proxy.close()
