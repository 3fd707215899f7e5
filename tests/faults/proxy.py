"""A loopback TCP proxy a test can cut and restore: the network between a client and a real
server failing, without stopping the server other tests share.

`cut()` closes every open connection at once (the client sees a reset mid-statement) and
refuses new ones until `restore()`. `stall()` keeps every connection open but forwards nothing
(a network that hangs: the client's reads and writes block) until `resume()`. `lag(seconds)`
keeps everything flowing but holds each piece read `seconds` before passing it on, live on the
open connections, until `lag(0)`: a slow network, not a cut (each direction then moves at most
one read, 64 KiB, per lag, as a TCP window over a long round trip would). A piece held is
released at its read time plus the lag in force, so raising the lag holds it longer and
`lag(0)` releases it at once: the slow network ends at the heal, not a lag later. Threads only;
everything ends with `close()`.

`Throttle` makes it a remote link instead: each direction of each connection delivers its
bytes a fixed delay after they arrive (half the round trip) and no faster than a byte rate,
the way a sink across a network limits every connection on its own while several
connections add up. ``python -m tests.faults.proxy HOST:PORT --rtt-ms … --kbps …`` runs one
in a process of its own (a benchmark counts its CPU apart) and prints its port.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Throttle:
    rtt_s: float = 0.0
    """Round-trip time: each direction delays its bytes by half of it."""
    bytes_per_s: float = 0.0
    """Per connection and direction; 0 is unlimited."""


class _Link:
    """One direction of one connection throttled: a delay line. The receiving thread stamps
    what it reads; the sending thread delivers each piece at its stamp plus the delay, paced
    to the byte rate, so bytes in flight overlap as on a network (a statement in many pieces
    pays the delay once)."""

    def __init__(self, throttle: Throttle, closed: threading.Event) -> None:
        self._delay = throttle.rtt_s / 2
        self._rate = throttle.bytes_per_s
        self._closed = closed
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._ready = threading.Condition()
        self._ended = False

    def put(self, data: bytes) -> None:
        with self._ready:
            self._queue.append((time.monotonic() + self._delay, data))
            self._ready.notify()

    def end(self) -> None:
        with self._ready:
            self._ended = True
            self._ready.notify()

    def deliver(self, dst: socket.socket) -> None:
        free = 0.0  # when the link has sent the bytes before
        while not self._closed.is_set():
            with self._ready:
                while not self._queue and not self._ended and not self._closed.is_set():
                    self._ready.wait(0.5)
                if not self._queue:
                    return
                due, data = self._queue.popleft()
            start = max(due, free)
            free = start + (len(data) / self._rate if self._rate else 0.0)
            # Waits for the link's own clock, woken early only by close().
            self._closed.wait(max(0.0, free - time.monotonic()))
            dst.sendall(data)


class Proxy:
    def __init__(self, target: tuple[str, int], throttle: Throttle | None = None) -> None:
        self._target = target
        self._throttle = throttle
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
        self._lag_s = 0.0
        self._lag_changed = threading.Condition()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.connections = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # refused while cut
                continue
            try:
                server = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets.update((client, server))
                self.connections += 1
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        link = None if self._throttle is None else _Link(self._throttle, self._closed)
        sender = None
        if link is not None:
            sender = threading.Thread(target=self._send, args=(link, src, dst), daemon=True)
            sender.start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                # Bounded: a stall longer than a minute is a test that forgot to resume.
                if not self._flowing.wait(60):
                    break
                if self._lag_s > 0:
                    self._hold(time.monotonic())
                if link is None:
                    dst.sendall(data)
                else:
                    link.put(data)
        except OSError:
            pass
        finally:
            if link is None:
                self._drop(src, dst)
            else:
                link.end()  # the sender drops both once it delivered what was read

    def _hold(self, read_at: float) -> None:
        """The added latency of a piece read at `read_at`: until the lag in force has passed
        since then (woken by a change of lag, so `lag(0)` releases it), or close()."""
        with self._lag_changed:
            while not self._closed.is_set():
                left = read_at + self._lag_s - time.monotonic()
                if left <= 0:
                    return
                self._lag_changed.wait(left)

    def _send(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        try:
            link.deliver(dst)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._sockets.discard(s)
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    s.close()

    def cut(self) -> None:
        self._open.clear()
        with self._lock:
            open_now = list(self._sockets)
        self._drop(*open_now)

    def restore(self) -> None:
        self._open.set()

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def lag(self, seconds: float) -> None:
        with self._lag_changed:
            self._lag_s = max(0.0, seconds)
            self._lag_changed.notify_all()

    def close(self) -> None:
        self._closed.set()
        self.lag(0)  # wakes the pieces held
        self.resume()
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m tests.faults.proxy", description=__doc__)
    parser.add_argument("target", help="HOST:PORT of the server")
    parser.add_argument("--rtt-ms", type=float, default=0.0, help="round trip added")
    parser.add_argument(
        "--kbps", type=float, default=0.0, help="KB/s per connection and direction (0: no cap)"
    )
    parser.add_argument(
        "--with-parent",
        action="store_true",
        help="end when standard input closes (the parent that holds it ended, even by kill -9)",
    )
    args = parser.parse_args(argv)
    host, port = args.target.rsplit(":", 1)
    throttle = Throttle(args.rtt_ms / 1000, args.kbps * 1000)
    proxy = Proxy((host, int(port)), throttle if args.rtt_ms or args.kbps else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.with_parent:
        import sys

        def watch() -> None:
            sys.stdin.read()  # returns at end of file: the parent's end of the pipe closed
            stop.set()

        threading.Thread(target=watch, daemon=True).start()
    print(proxy.port, flush=True)
    while not stop.wait(1.0):
        pass
    proxy.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
