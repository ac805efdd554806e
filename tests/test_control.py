"""The local control API: a real HTTP client against a running session, every bad request, and
the stream carrying on through all of them."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import livefuse.control as control
from livefuse.config import AppConfig, CaptureConfig, ControlConfig, EngineConfig
from livefuse.control import ControlServer, TokenFile, load_or_create_token, read_token
from livefuse.engine import Engine
from livefuse.errors import LivefuseError
from livefuse.imaging import load_image, save_image
from livefuse.io.sources import FramesSource
from livefuse.presets import Preset, PresetSource, PresetStore
from livefuse.samples import insightface_image
from livefuse.session import Session
from livefuse.testing.guard_clip import guard_clip

TOKEN = "test-token-0123456789-abcdefghijkl"
ENGINE = EngineConfig(face_selector="one", detect_every=3, rotation="off")


# -- the token -----------------------------------------------------------------------------------
def test_token_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "control-token"
    token = load_or_create_token(path)
    assert len(token) >= 40 and load_or_create_token(path) == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["control-token"]  # no temp file left
    os.chmod(path, 0o644)  # someone widened it: narrowed again when read
    assert read_token(path) == token and stat.S_IMODE(path.stat().st_mode) == 0o600
    new = load_or_create_token(path, new=True)
    assert new != token and read_token(path) == new
    path.write_text("short\n", encoding="ascii")
    with pytest.raises(LivefuseError, match="too short"):
        read_token(path)


def test_concurrent_first_uses_agree_on_one_token(tmp_path: Path) -> None:
    path = tmp_path / "control-token"
    got: list[str] = []
    threads = [threading.Thread(target=lambda: got.append(load_or_create_token(path)))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1 and read_token(path) == got[0]


def test_control_token_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["control-token"]) == 0
    out, err = capsys.readouterr()
    path = tmp_path / "livefuse" / "control-token"
    assert out.strip() == path.read_text(encoding="ascii").strip() and "mode 0600" in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# -- a running session with the API --------------------------------------------------------------
class Running:
    def __init__(self, session: Session, frames: list[float]) -> None:
        self.session, self.frames = session, frames
        server = session.control
        assert server is not None
        self.server = server

    def request(self, method: str, path: str, body: Any = None, token: str | None = TOKEN,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        conn.close()
        return resp.status, json.loads(raw) if raw else {}, resp


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, analyser: Any,
            astronaut_path: Path, hanks_path: Path) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("control")
    store = PresetStore(tmp / "presets")
    for name, src in (("Astro", astronaut_path), ("Hanks", hanks_path)):
        dst = tmp / f"{name}{src.suffix}"
        shutil.copy(src, dst)
        store.save(Preset.of(name, AppConfig(engine=ENGINE), PresetSource(path=str(dst))))
    wall = save_image(tmp / "wall.png", np.full((200, 200, 3), 120, np.uint8))
    (store.folder / "Wall.toml").write_text(f'[source]\npath = "{wall}"\n', encoding="utf-8")
    clip = guard_clip(load_image(insightface_image("t1.jpg")).bgr, frames=24).frames
    frames: list[float] = []
    cfg = AppConfig(capture=CaptureConfig(kind="test pattern", width=640, height=480),
                    control=ControlConfig(enabled=True, port=0))
    session = Session(cfg, on_frame=lambda f, t: frames.append(time.monotonic()),
                      source_factory=lambda c: FramesSource(clip, fps=10), presets=store,
                      engine_factory=lambda c: Engine(c.engine, analyser=analyser,
                                                      cache=c.cache))
    session.switch_preset("Astro")
    session.preload_presets()
    session.open_control(token=TOKEN)
    session.start()
    end = time.monotonic() + 30
    while len(frames) < 3 and time.monotonic() < end:
        time.sleep(0.05)
    yield Running(session, frames)
    session.stop(2.0)
    session.close_control()


def test_it_listens_on_localhost_only_by_default(running: Running) -> None:
    assert running.server.host == "127.0.0.1"
    assert running.server.url == f"http://127.0.0.1:{running.server.port}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(LivefuseError, match=r"cannot listen on 127\.0\.0\.1:.*port is in use"):
            ControlServer(running.session, TOKEN, "127.0.0.1", s.getsockname()[1])


def test_a_new_token_locks_the_old_one_out_of_a_running_server(
        running: Running, tmp_path: Path) -> None:
    """A new user's trial: after `livefuse control-token --new` a running session took the old
    token and refused the new one until it was restarted."""
    path = tmp_path / "control-token"
    old = load_or_create_token(path)
    server = ControlServer(running.session, TokenFile(path), "127.0.0.1", 0)
    try:
        def status(token: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", "/status", headers={"Authorization": f"Bearer {token}"})
            code = conn.getresponse().status
            conn.close()
            return code

        assert status(old) == 200
        new = load_or_create_token(path, new=True)
        assert new != old and status(new) == 200 and status(old) == 401
        # read_token's advice, "delete the file and a new one is made", locks the old out too
        path.unlink()
        assert status(new) == 401 and status(read_token(path)) == 200
    finally:
        server.close()


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-0123456789", f"Basic {TOKEN}",
                                  "Bearer", f"Bearer {TOKEN}x"])
def test_a_missing_or_wrong_token_is_401(running: Running, auth: str | None) -> None:
    headers = {} if auth is None else {"Authorization": auth}
    for method, path, body in (("GET", "/status", None), ("POST", "/preset", {"name": "Hanks"}),
                               ("GET", "/nope", None)):
        code, answer, resp = running.request(method, path, body, token=None, headers=headers)
        assert code == 401 and "bearer token" in answer["error"]
        assert resp.getheader("WWW-Authenticate") == 'Bearer realm="livefuse"'
    assert running.session.active_preset == "Astro"  # the unauthorised switch did not run


def test_status_names_the_engine_that_runs(tmp_path: Path) -> None:
    """A new user's trial: /status said "engine": "auto" of a session running the classic
    engine."""
    cfg = AppConfig(engine=EngineConfig(engine="auto", models_dir=str(tmp_path / "none")))
    status = Session(cfg).status()
    assert (status["engine"], status["engine_asked"]) == ("classic", "auto")


def test_status_and_presets(running: Running) -> None:
    code, status, resp = running.request("GET", "/status")
    assert code == 200 and resp.getheader("Content-Type").startswith("application/json")
    assert status["running"] and status["engine"] == "classic"
    assert status["engine_asked"] == status["engine"]
    assert status["precision"] == "n/a (classic engine)"
    assert set(status) >= {"fps", "latency_ms", "dropped", "preset", "guard", "swap"}
    assert status["fps"]["output"] > 0 and status["guard"]["mode"] == "off"
    code, presets, _ = running.request("GET", "/presets/")
    assert code == 200 and [p["name"] for p in presets["presets"]] == ["Astro", "Hanks", "Wall"]


def _stream_carries_on(running: Running, since: float) -> None:
    n = len([t for t in running.frames if t > since])
    end = time.monotonic() + 30
    while len([t for t in running.frames if t > since]) < n + 3 and time.monotonic() < end:
        time.sleep(0.05)
    assert len([t for t in running.frames if t > since]) >= n + 3
    runner = running.session.runner
    assert runner is not None and runner.errors == 0 and runner.running


def test_every_bad_request_gets_its_answer_and_the_stream_carries_on(running: Running) -> None:
    t0 = time.monotonic()
    bad: list[tuple[str, str, Any, dict[str, str], int, str]] = [
        ("POST", "/preset", b'{"name": ', {}, 400, "malformed JSON"),
        ("POST", "/preset", b"\xff\xfe", {}, 400, "malformed JSON"),
        ("POST", "/preset", b"[1, 2]", {}, 400, "must be a JSON object"),
        ("POST", "/preset", {"name": 5}, {}, 400, "wrong type"),
        ("POST", "/preset", {"nmae": "Hanks"}, {}, 400, "unknown field(s): nmae"),
        ("POST", "/preset", {}, {}, 400, "missing field 'name'"),
        ("POST", "/preset", {"name": "Nope"}, {}, 404, "preset 'Nope': not found"),
        ("POST", "/preset", {"name": "../../etc/passwd"}, {}, 404, "not found"),
        ("POST", "/preset", {"name": "Wall"}, {}, 422, "no face in source"),
        ("POST", "/swap", {"on": "no"}, {}, 400, "wrong type"),
        ("POST", "/swap", {"on": 1}, {}, 400, "wrong type"),
        ("POST", "/guard", {"mode": "smudge"}, {}, 400, "not one of off, blur, hold"),
        ("POST", "/guard", {"mode": "hold", "hold_frames": 0}, {}, 422, "hold_frames"),
        ("POST", "/source", {"path": "/no/such/photo.png"}, {}, 422, "file not found"),
        ("POST", "/source", {"path": __file__}, {}, 422, "not a recognised image"),
        ("GET", "/nope", None, {}, 404, "no endpoint /nope"),
        ("GET", "/preset", None, {}, 405, "use POST"),
        ("DELETE", "/status", None, {}, 405, "use GET"),
        ("PUT", "/preset", b"{}", {}, 405, "use POST"),
        ("POST", "/preset", b'{"name": "Hanks"}', {"Transfer-Encoding": "chunked"}, 411,
         "Content-Length"),
    ]
    for method, path, body, headers, code, text in bad:
        got, answer, _ = running.request(method, path, body, headers=headers)
        assert (got, text in answer.get("error", "")) == (code, True), (path, body, answer)
    assert running.session.active_preset == "Astro"
    status = running.request("GET", "/status")[1]
    assert status["swap"] and status["guard"]["mode"] == "off"
    assert status["source"].endswith("Astro.png")
    _stream_carries_on(running, t0)
    # the frames kept coming while the requests were answered
    during = [t for t in running.frames if t > t0]
    assert during and max(np.diff([t0, *during])) < 3.0


def _raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        chunks = []
        try:
            while chunk := s.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


def test_requests_are_size_limited(running: Running) -> None:
    port = running.server.port
    head = (f"POST /preset HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Length: {10**9}\r\n\r\n").encode()
    answer = _raw(port, head + b"{")  # answered at once, the body never read
    assert answer.startswith(b"HTTP/1.0 413") and b"at most 16384" in answer
    no_length = f"POST /swap HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
    assert _raw(port, no_length).startswith(b"HTTP/1.0 411")
    huge_header = (f"GET /status HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n"
                   f"X-Pad: {'a' * 70000}\r\n\r\n").encode()
    assert _raw(port, huge_header).split(b" ")[1] in (b"400", b"431")
    _stream_carries_on(running, time.monotonic())


def test_requests_are_time_limited(running: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(control, "REQUEST_TIMEOUT_S", 1.0)
    port = running.server.port
    t0 = time.monotonic()
    # a client that sends half its headers and then a byte now and then (slowloris)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /status HTTP/1.0\r\n")
        closed = False
        for _ in range(20):
            time.sleep(0.3)
            try:
                s.sendall(b"X")
                if s.recv(1, socket.MSG_DONTWAIT) == b"":
                    closed = True
                    break
            except BlockingIOError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - t0 < 4.0
    # a body that never comes
    head = (f"POST /preset HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 100\r\n\r\n{").encode()
    t0 = time.monotonic()
    answer = _raw(port, head)
    assert time.monotonic() - t0 < 4.0 and not answer.startswith(b"HTTP/1.0 200")
    assert running.session.active_preset == "Astro"
    _stream_carries_on(running, t0)


def test_too_many_connections_get_503(running: Running) -> None:
    # idle connections are held until REQUEST_TIMEOUT_S (5 s) cuts them off
    idle = [socket.create_connection(("127.0.0.1", running.server.port))
            for _ in range(control.MAX_CONNECTIONS)]
    try:
        end = time.monotonic() + 10
        while running.server.busy < control.MAX_CONNECTIONS and time.monotonic() < end:
            time.sleep(0.02)
        get = f"GET /status HTTP/1.0\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        assert _raw(running.server.port, get).startswith(b"HTTP/1.0 503")
        time.sleep(control.REQUEST_TIMEOUT_S + 0.5)  # the idle ones were cut off: served again
        assert _raw(running.server.port, get).startswith(b"HTTP/1.0 200")
    finally:
        for s in idle:
            s.close()


def test_switch_swap_guard_source(running: Running, hanks_path: Path) -> None:
    t0 = time.monotonic()
    code, answer, _ = running.request("POST", "/preset", {"name": "hanks"})
    assert code == 200 and answer["preset"] == "Hanks" and answer["status"]["preset"] == "Hanks"
    assert running.session.source_path is not None
    assert running.session.source_path.name == "Hanks.png"
    assert running.request("POST", "/swap", {"on": False})[0] == 200
    assert not running.session.swap_on and running.session.runner is not None
    assert not running.session.runner.swap
    assert running.request("POST", "/swap", {"on": True})[0] == 200
    assert running.request("POST", "/guard", {"mode": "hold", "hold_frames": 5})[0] == 200
    status = running.request("GET", "/status")[1]
    assert status["guard"]["mode"] == "hold" and status["guard"]["hold_frames"] == 5
    # as the CLI refuses --guard-hold-frames without hold (a new user's trial: 200 here)
    code, answer, _ = running.request("POST", "/guard", {"mode": "blur", "hold_frames": 5})
    assert code == 400 and "hold_frames: only with mode 'hold'" in str(answer)
    assert running.request("POST", "/guard", {"mode": "blur"})[0] == 200
    assert status["detect_every"] == 1 and status["preset_modified"]
    code, answer, _ = running.request("POST", "/source", {"path": str(hanks_path)})
    assert code == 200 and running.session.source_path == hanks_path
    assert running.request("POST", "/guard", {"mode": "off"})[0] == 200
    assert running.request("POST", "/preset", {"name": "Astro"})[0] == 200
    assert not running.request("GET", "/status")[1]["preset_modified"]
    assert running.server.requests >= 8
    _stream_carries_on(running, t0)


def test_live_cli_serves_the_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 astronaut_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`livefuse live --preset NAME --control-port PORT`: the token from `control-token`
    works, the preset switches, the run ends normally."""
    from livefuse.cli import main
    from livefuse.io.synthetic import write_clip

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    frames = guard_clip(load_image(insightface_image("t1.jpg")).bgr, frames=12).frames
    video = write_clip(frames, tmp_path / "cam.mp4", audio=False)
    assert main(["presets", "save", "One", "-s", str(astronaut_path), "--engine",
                 "classic"]) == 0
    assert main(["presets", "save", "Two", "-s", str(astronaut_path), "--engine", "classic",
                 "--privacy-guard", "blur"]) == 0
    assert main(["control-token"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code: list[int] = []
    t = threading.Thread(target=lambda: code.append(main(
        ["live", "--preset", "one", "--video", str(video), "--loop", "--control-port",
         str(port), "--duration", "25"])))
    t.start()
    try:
        answer: dict[str, Any] = {}
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("POST", "/preset", body=b'{"name": "Two"}',
                             headers={"Authorization": f"Bearer {token}"})
                answer = json.loads(conn.getresponse().read())
                break
            except ConnectionRefusedError:
                time.sleep(0.2)
        assert answer.get("preset") == "Two", answer
        assert answer["status"]["guard"]["mode"] == "blur"
    finally:
        t.join(60)
    assert code == [0]
    err = capsys.readouterr().err
    assert "[status] preset: One" in err and f"control API on http://127.0.0.1:{port}" in err
    assert "[status] control API: preset Two" in err
    # both presets' faces were prepared before the stream started: the switch detects nothing
    assert "preset One: ready" in err and "preset Two: ready" in err
    with pytest.raises(ConnectionRefusedError):  # closed with the session
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_live_cli_preset_and_source_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          astronaut_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    from livefuse.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["live", "--camera", "7"]) == 2
    assert "-s PHOTO) or a preset (--preset NAME)" in capsys.readouterr().err
    assert main(["live", "--preset", "X", "--detect-every", "5", "--no-cache"]) == 2
    assert "--no-cache --detect-every: --preset 'X' sets the engine and cache" in \
        capsys.readouterr().err
    assert main(["live", "--preset", "X", "--duration", "1"]) == 2
    assert "preset 'X': not found" in capsys.readouterr().err
