"""A loopback HTTP server for the download tests: no internet, faults on demand.

It serves byte strings by path, honours ``Range: bytes=N-`` with a 206, and can cut a response
halfway, force a status, ignore ranges, answer a range from byte 0, or stall before answering.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Served:
    """What the server holds and does; tests change it between requests."""

    files: dict[str, bytes] = field(default_factory=dict)
    status: dict[str, int] = field(default_factory=dict)  # path -> forced HTTP status
    cut_first: dict[str, int] = field(default_factory=dict)  # path -> responses cut halfway
    ignore_range: bool = False  # answer a Range request with the whole body and a 200
    wrong_range_once: bool = False  # answer the first Range request from byte 0 with a 206
    stall_s: float = 0.0  # wait this long (or until release) before the status line
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range)

    @property
    def ranges(self) -> list[str | None]:
        """The Range header of each request, in order (None: none sent)."""
        return [r for _, r in self.requests]


def _handler(state: Served) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            rng = self.headers.get("Range")
            state.requests.append((self.path, rng))
            if state.stall_s:
                state.release.wait(state.stall_s)
            if self.path in state.status:
                self.send_error(state.status[self.path])
                return
            if self.path not in state.files:
                self.send_error(404, "Not Found")
                return
            body, start = state.files[self.path], 0
            if rng and not state.ignore_range:
                start = int(rng.removeprefix("bytes=").split("-")[0])
                if state.wrong_range_once:
                    state.wrong_range_once = False
                    start = 0
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            payload = body[start:]
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if state.cut_first.get(self.path, 0) > 0:
                state.cut_first[self.path] -= 1
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(payload)

    return Handler


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client hanging up mid-body is what the timeout and resume tests do: no traceback."""


@contextmanager
def serve(state: Served) -> Iterator[str]:
    """Serve ``state`` on 127.0.0.1 on a free port; yields the base URL (no trailing slash)."""
    httpd = _QuietServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
