"""The local control API: a Stream Deck, Bitfocus Companion, an OBS script or a hotkey daemon
drives a running session over HTTP (design.md §9).

* Listens on 127.0.0.1 unless the user names another address (``--control-host``); plain HTTP
  (``http.server.ThreadingHTTPServer``), so only trusted networks if another address is named.
* Every request carries ``Authorization: Bearer TOKEN``. The token is made on first use (32
  random bytes, URL-safe) and stored with mode 0600 as ``control-token`` in the config folder;
  ``livefuse control-token`` prints it. A missing or wrong token gets 401 before the body is read.
* JSON in and out. Bodies are at most :data:`MAX_BODY` bytes and need a ``Content-Length``;
  a request must arrive whole within :data:`REQUEST_TIMEOUT_S` s; at most
  :data:`MAX_CONNECTIONS` connections are served at once (more get 503).
* A bad request (malformed JSON, an unknown field or preset, a photo without a face) gets a 4xx
  answer with a message; the stream carries on untouched.

Endpoints (answers are JSON objects; errors are ``{"error": "..."}``):

==========================  ========================================================
``GET /status``             fps, latency, drops, preset, engine, precision, swap, guard
``GET /presets``            the presets and the active one
``POST /preset``            ``{"name": "Gaming"}``: switch preset (404 unknown; 422 refused)
``POST /swap``              ``{"on": false}``: swap on or off
``POST /guard``             ``{"mode": "hold", "hold_frames": 15}``: privacy guard
                            (``hold_frames`` only with ``hold``)
``POST /source``            ``{"path": "/photos/me.jpg", "face_index": 0}``: source photo
==========================  ========================================================
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from livefuse.config import CONTROL_HOST, GUARD_CHOICES, GuardMode, default_config_path
from livefuse.errors import LivefuseError

log = logging.getLogger(__name__)

TOKEN_FILE = "control-token"
MAX_BODY = 16 * 1024
"""Largest request body in bytes (the biggest real one, a photo path, is well under 4 KiB)."""
REQUEST_TIMEOUT_S = 5.0
"""A request's line, headers and body must all have arrived this many seconds after the
connection opened; a slower client is cut off (a stalled client cannot hold a thread)."""
MAX_CONNECTIONS = 16
"""Connections served at once; more are answered 503 at once."""


def token_path(folder: Path | None = None) -> Path:
    """``control-token`` in ``folder`` (the user config dir by default)."""
    return (folder or default_config_path().parent) / TOKEN_FILE


def _write_new_token(path: Path) -> str:
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(token + "\n")
        try:
            os.link(tmp, path)  # never replaces a token another process made meanwhile
        except FileExistsError:
            return read_token(path)
        except OSError:  # no hard links on this file system
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return token


def read_token(path: Path) -> str:
    """The token stored at ``path``; a file readable by others is narrowed to 0600.

    Raises:
        LivefuseError: the file cannot be read or is empty.
    """
    try:
        if os.name == "posix" and path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise LivefuseError(f"cannot read the control token '{path}': {exc}") from None
    if len(token) < 16:
        raise LivefuseError(f"the control token '{path}' is empty or too short: delete the "
                            "file and a new one is made (`livefuse control-token --new`)")
    return token


class TokenFile:
    """The token stored in a file, read again whenever the file changes (inode, size or
    modification time), so that ``livefuse control-token --new`` locks the old token out of a
    running session at once (a new user's trial: the old one kept working until a restart).
    A deleted file is made anew with a new token; one that cannot be read keeps the last token
    read. Request threads call it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._token = load_or_create_token(path)

    def __call__(self) -> str:
        try:
            st = self.path.stat()
        except FileNotFoundError:  # "delete the file and a new one is made": the old is out
            with self._lock, contextlib.suppress(LivefuseError):
                self._token = load_or_create_token(self.path)
            return self._token
        except OSError:
            return self._token
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # --new writes a new file
        with self._lock:
            if stamp != self._stamp:
                with contextlib.suppress(LivefuseError):
                    self._token = read_token(self.path)
                    self._stamp = stamp
            return self._token


def load_or_create_token(path: Path | None = None, new: bool = False) -> str:
    """The control API's bearer token, made (mode 0600) on first use.

    Args:
        path: the token file (:func:`token_path` by default).
        new: make a new token, replacing the old one (every client must be given it again).

    Raises:
        LivefuseError: the file cannot be read or written.
    """
    path = path or token_path()
    try:
        if new:
            path.unlink(missing_ok=True)
        if path.exists():
            return read_token(path)
        return _write_new_token(path)
    except OSError as exc:
        raise LivefuseError(f"cannot write the control token '{path}': {exc}") from None


class Controller(Protocol):
    """What the API drives (:class:`livefuse.session.Session` has it). Called on the server's
    request threads."""

    def status(self) -> dict[str, Any]: ...
    def presets_info(self) -> dict[str, Any]: ...
    def switch_preset(self, name: str, timeout: float = ...) -> Any: ...
    def set_swap(self, on: bool) -> None: ...
    def set_guard(self, mode: GuardMode, hold_frames: int | None = None) -> None: ...
    def set_source_path(self, path: str, face_index: int | None = None) -> Any: ...


class BadRequest(Exception):
    """A request the API answers with a 4xx code and a message."""

    def __init__(self, code: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.code = code


def _fields(body: dict[str, Any], required: dict[str, type | tuple[type, ...]],
            optional: dict[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
    """``body``'s fields checked against the expected names and JSON types (400 otherwise)."""
    optional = optional or {}
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}; "
                         f"expected {', '.join([*required, *optional])}")
    for name, kind in {**required, **optional}.items():
        if name not in body:
            if name in required:
                raise BadRequest(HTTPStatus.BAD_REQUEST, f"missing field '{name}'")
            continue
        value = body[name]
        # JSON true is a Python int too: a bool only where a bool is asked for
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"field '{name}' has the wrong type")
    return body


def _error_code(exc: LivefuseError) -> HTTPStatus:
    from livefuse.presets import PresetNotFoundError

    if isinstance(exc, PresetNotFoundError):
        return HTTPStatus.NOT_FOUND
    return HTTPStatus.UNPROCESSABLE_ENTITY


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads
    server_version = "livefuse-control"
    sys_version = ""
    timeout = REQUEST_TIMEOUT_S  # each socket read; the whole request: _expire

    def setup(self) -> None:
        super().setup()
        self._timer = threading.Timer(REQUEST_TIMEOUT_S, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        """The request did not arrive in time: end the connection (its read fails)."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._timer.cancel()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("control %s: " + format, self.client_address[0], *args)

    def _send(self, code: HTTPStatus, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = (json.dumps(body, ensure_ascii=False) + "\n").encode("utf-8")
        with contextlib.suppress(OSError):  # the client went away, or was cut off
            self.send_response(code)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    def _authorise(self) -> None:
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode("utf-8", "replace"), self.server.token().encode("ascii")):
            self.server.count(refused=True)
            raise BadRequest(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token "
                                                      "(`livefuse control-token` prints it)")

    def _body(self) -> dict[str, Any]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise BadRequest(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise BadRequest(HTTPStatus.LENGTH_REQUIRED, "a JSON body with a Content-Length "
                                                         "is needed")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise BadRequest(HTTPStatus.BAD_REQUEST, "bad Content-Length") from None
        if length > MAX_BODY:
            raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                             f"the body is {length} bytes; at most {MAX_BODY} are taken")
        raw = self.rfile.read(length)
        if len(raw) < length:
            raise BadRequest(HTTPStatus.BAD_REQUEST, "the body ended early")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"malformed JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        return body

    def _route(self, method: str) -> Callable[[], dict[str, Any]] | None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        routes: dict[tuple[str, str], Callable[[], dict[str, Any]]] = {
            ("GET", "/status"): self._status, ("GET", "/presets"): self._presets,
            ("POST", "/preset"): self._preset, ("POST", "/swap"): self._swap,
            ("POST", "/guard"): self._guard, ("POST", "/source"): self._source}
        if (method, path) in routes:
            return routes[(method, path)]
        allowed = [m for m, p in routes if p == path]
        if allowed:
            raise BadRequest(HTTPStatus.METHOD_NOT_ALLOWED,
                             f"{method} {path}: use {', '.join(allowed)}")
        raise BadRequest(HTTPStatus.NOT_FOUND, f"no endpoint {path}; the endpoints: "
                         + ", ".join(f"{m} {p}" for m, p in routes))

    def _handle(self, method: str) -> None:
        self.server.count()
        headers: dict[str, str] = {}
        try:
            self._authorise()
            action = self._route(method)
            assert action is not None
            self._payload: dict[str, Any] = self._body() if method == "POST" else {}
            self._timer.cancel()  # the request is in: the action may take its time
            code, answer = HTTPStatus.OK, action()
        except BadRequest as exc:
            code, answer = exc.code, {"error": str(exc)}
            if code == HTTPStatus.UNAUTHORIZED:
                headers["WWW-Authenticate"] = 'Bearer realm="livefuse"'
            elif code == HTTPStatus.METHOD_NOT_ALLOWED:
                headers["Allow"] = "GET, POST"
        except LivefuseError as exc:
            code, answer = _error_code(exc), {"error": str(exc)}
        except OSError:  # the client went away or was too slow (TimeoutError is one)
            return
        except Exception as exc:  # a bug must not take the stream or the server down
            log.exception("control API: %s %s", method, self.path)
            code, answer = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {exc}"}
        self._send(code, answer, headers)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _other(self) -> None:
        self._handle(self.command)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _other

    # -- the endpoints ---------------------------------------------------------------------------
    def _status(self) -> dict[str, Any]:
        return self.server.controller.status()

    def _presets(self) -> dict[str, Any]:
        return self.server.controller.presets_info()

    def _preset(self) -> dict[str, Any]:
        body = _fields(self._payload, {"name": str})
        preset = self.server.controller.switch_preset(body["name"])
        self.server.on_status(f"control API: preset {preset.name}")
        return {"preset": preset.name, "status": self.server.controller.status()}

    def _swap(self) -> dict[str, Any]:
        body = _fields(self._payload, {"on": bool})
        self.server.controller.set_swap(body["on"])
        # in the log as a preset switch is (a GUI trial: swap off left no line)
        self.server.on_status(f"control API: swap {'on' if body['on'] else 'off'}")
        return {"swap": body["on"]}

    def _guard(self) -> dict[str, Any]:
        body = _fields(self._payload, {"mode": str}, {"hold_frames": int})
        if body["mode"] not in GUARD_CHOICES:
            raise BadRequest(HTTPStatus.BAD_REQUEST, f"mode '{body['mode']}' is not one of "
                                                     f"{', '.join(GUARD_CHOICES)}")
        if "hold_frames" in body and body["mode"] != "hold":  # as the CLI refuses it
            raise BadRequest(HTTPStatus.BAD_REQUEST, "hold_frames: only with mode 'hold'")
        self.server.controller.set_guard(body["mode"], body.get("hold_frames"))
        self.server.on_status(f"control API: privacy guard {body['mode']}")
        return {"guard": body["mode"]}

    def _source(self) -> dict[str, Any]:
        body = _fields(self._payload, {"path": str}, {"face_index": int})
        self.server.controller.set_source_path(body["path"], body.get("face_index"))
        return {"source": body["path"]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], controller: Controller,
                 token: Callable[[], str], on_status: Callable[[str], None]) -> None:
        self.controller, self.token, self.on_status = controller, token, on_status
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._count_lock = threading.Lock()
        self.requests = 0
        self.refused = 0
        self.busy = 0
        super().__init__(address, _Handler)

    def _busy(self, step: int) -> None:
        with self._count_lock:
            self.busy += step

    def count(self, refused: bool = False) -> None:
        with self._count_lock:
            if refused:
                self.refused += 1
            else:
                self.requests += 1

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
            self.shutdown_request(request)
            return
        self._busy(1)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._busy(-1)
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._busy(-1)
            self._slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


class ControlServer:
    """Serves the control API on its own threads until :meth:`close`.

    Args:
        controller: what the requests drive (a :class:`livefuse.session.Session`).
        token: the bearer token every request must carry, or what gives it at each request
            (a :class:`TokenFile`: a new token takes effect at once).
        host: the address to listen on (:data:`livefuse.config.CONTROL_HOST` by default).
        port: the TCP port (0: a free one, see :attr:`port`).
        on_status: status lines (a non-local address is announced there).

    Raises:
        LivefuseError: the address cannot be bound (the port is taken, an unknown host).
    """

    def __init__(self, controller: Controller, token: str | Callable[[], str],
                 host: str = CONTROL_HOST, port: int = 8765,
                 on_status: Callable[[str], None] | None = None) -> None:
        say = on_status or (lambda s: None)
        cls = _Server6 if ":" in host else _Server
        given = token
        current: Callable[[], str] = (lambda: given) if isinstance(given, str) else given
        try:
            self._server = cls((host, port), controller, current, say)
        except OSError as exc:
            why = "the port is in use" if exc.errno in (98, 48, 10048) else \
                (exc.strerror or str(exc))
            raise LivefuseError(f"control API: cannot listen on {host}:{port}: {why}") from None
        self.host, self.port = host, int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.2},
                                        name="livefuse-control", daemon=True)
        self._thread.start()
        local = host in ("127.0.0.1", "::1", "localhost")
        say(f"control API on {self.url}" + ("" if local else
            " (not only this computer: anyone on the network who has the token can control "
            "the stream, and plain HTTP carries the token unencrypted)"))

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def requests(self) -> int:
        """Requests received (refused ones included)."""
        return self._server.requests

    @property
    def busy(self) -> int:
        """Connections being served now."""
        return self._server.busy

    @property
    def refused(self) -> int:
        """Requests refused for a missing or wrong token."""
        return self._server.refused

    def close(self, timeout: float = 2.0) -> None:
        """Stop accepting requests and close the socket (requests in flight finish on their
        daemon threads)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)


__all__ = ["MAX_BODY", "MAX_CONNECTIONS", "REQUEST_TIMEOUT_S", "TOKEN_FILE", "BadRequest",
           "ControlServer", "Controller", "TokenFile", "load_or_create_token", "read_token",
           "token_path"]
