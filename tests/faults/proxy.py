"""A loopback TCP proxy a test can cut and restore: the network between a client and a real
server failing, without stopping the server other tests share.

`cut()` closes every open connection at once (the client sees a reset mid-statement) and
refuses new ones until `restore()`. `stall()` keeps every connection open but forwards nothing
(a network that hangs: the client's reads and writes block) until `resume()`. Threads only;
everything ends with `close()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = threading.Event()
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
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                # Bounded: a stall longer than a minute is a test that forgot to resume.
                if not self._flowing.wait(60):
                    break
                dst.sendall(data)
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

    def close(self) -> None:
        self._closed.set()
        self.resume()
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)
