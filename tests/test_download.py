"""The model downloader against a loopback HTTP server (no internet needed)."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from loopback_http import Served, serve

from livefuse.errors import LivefuseError
from livefuse.models import download as dl
from livefuse.models.catalog import ModelSpec

DATA = np.random.default_rng(7).integers(0, 256, 300_000, dtype=np.uint8).tobytes()


MODEL = "/model.onnx"


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    state = Served(files={MODEL: DATA})
    with serve(state) as base:
        yield base, state


def _spec(base: str, path: str = "/model.onnx", data: bytes = DATA) -> ModelSpec:
    return ModelSpec(name="tiny", role="detector", filename="tiny.onnx", urls=(base + path,),
                     size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                     licence="test", input_size=(64, 64))


def test_full_download_verifies_renames_and_caches_digest(server, tmp_path: Path) -> None:
    base, state = server
    spec = _spec(base)
    out = dl.download(spec, tmp_path, progress=False)
    assert out == tmp_path / "tiny.onnx"
    assert out.read_bytes() == DATA
    assert not (tmp_path / "tiny.onnx.part").exists()
    assert state.ranges == [None]
    cache = json.loads((tmp_path / dl.CACHE_NAME).read_text())
    assert cache["tiny.onnx"]["sha256"] == spec.sha256
    assert dl.status(spec, tmp_path) == "present"
    # a second call finds the verified file and makes no request
    dl.download(spec, tmp_path, progress=False)
    assert len(state.ranges) == 1


def test_resume_after_cut_sends_range_from_part_size(server, tmp_path: Path) -> None:
    base, state = server
    state.cut_first[MODEL] = 1
    spec = _spec(base)
    with pytest.raises(dl.ModelDownloadError) as err:
        dl.download(spec, tmp_path, attempts=1, progress=False)
    assert "tiny.onnx" in str(err.value) and "livefuse models import" in str(err.value)
    assert "cut mid-download" in str(err.value)
    part = tmp_path / "tiny.onnx.part"
    kept = part.stat().st_size
    assert 0 < kept <= len(DATA) // 2  # the server sent half; whole 64 KiB reads were kept
    assert not (tmp_path / "tiny.onnx").exists()
    out = dl.download(spec, tmp_path, attempts=1, progress=False)
    assert state.ranges == [None, f"bytes={kept}-"]
    assert out.read_bytes() == DATA


def test_resume_within_one_call_when_attempts_allow(server, tmp_path: Path) -> None:
    base, state = server
    state.cut_first[MODEL] = 2
    out = dl.download(_spec(base), tmp_path, attempts=3, progress=False)
    assert out.read_bytes() == DATA
    assert len(state.ranges) == 3 and state.ranges[0] is None
    starts = [int(r.removeprefix("bytes=").rstrip("-")) for r in state.ranges[1:]]
    assert 0 < starts[0] < starts[1] < len(DATA)


def test_server_ignoring_range_restarts_the_part(server, tmp_path: Path) -> None:
    base, state = server
    state.ignore_range = True
    (tmp_path / "tiny.onnx.part").write_bytes(DATA[:1000])
    out = dl.download(_spec(base), tmp_path, progress=False)
    assert state.ranges == ["bytes=1000-"]
    assert out.read_bytes() == DATA  # not the 1000 B prefix twice


def test_206_for_another_range_restarts(server, tmp_path: Path) -> None:
    base, state = server
    state.wrong_range_once = True
    (tmp_path / "tiny.onnx.part").write_bytes(DATA[:1000])
    out = dl.download(_spec(base), tmp_path, attempts=2, progress=False)
    assert state.ranges == ["bytes=1000-", None]
    assert out.read_bytes() == DATA


def test_hash_mismatch_deletes_part_and_says_so(server, tmp_path: Path) -> None:
    base, _ = server
    spec = replace(_spec(base), sha256="0" * 64)
    with pytest.raises(dl.ModelVerifyError, match="deleted the downloaded part") as err:
        dl.download(spec, tmp_path, progress=False)
    assert "SHA-256" in str(err.value)
    assert isinstance(err.value, LivefuseError)
    assert not (tmp_path / "tiny.onnx.part").exists()
    assert not (tmp_path / "tiny.onnx").exists()


def test_longer_body_than_catalog_size_is_refused(server, tmp_path: Path) -> None:
    base, _ = server
    spec = replace(_spec(base), size=len(DATA) - 10)
    with pytest.raises(dl.ModelDownloadError, match="more than the expected"):
        dl.download(spec, tmp_path, attempts=1, progress=False)
    assert not (tmp_path / "tiny.onnx").exists()


def test_404_names_file_and_import_alternative(server, tmp_path: Path) -> None:
    base, state = server
    with pytest.raises(dl.ModelDownloadError) as err:
        dl.download(_spec(base, "/missing.onnx"), tmp_path, attempts=3, progress=False)
    msg = str(err.value)
    assert "HTTP 404" in msg and "tiny.onnx" in msg and "livefuse models import PATH" in msg
    assert len(state.ranges) == 1  # a 404 is not retried


def test_second_mirror_used_after_404(server, tmp_path: Path) -> None:
    base, _ = server
    spec = replace(_spec(base), urls=(base + "/gone.onnx", base + "/model.onnx"))
    assert dl.download(spec, tmp_path, progress=False).read_bytes() == DATA


def test_slow_server_times_out(server, tmp_path: Path) -> None:
    base, state = server
    state.stall_s = 5.0
    with pytest.raises(dl.ModelDownloadError, match="timed out"):
        dl.download(_spec(base), tmp_path, timeout=0.3, attempts=2, progress=False)
    assert len(state.ranges) == 2


def test_no_server_connection_refused(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    spec = _spec(f"http://127.0.0.1:{port}")
    with pytest.raises(dl.ModelDownloadError, match="refused") as err:
        dl.download(spec, tmp_path, timeout=2, attempts=2, progress=False)
    assert "livefuse models import PATH" in str(err.value)


# --- status / verify / import without a network ---------------------------------------------


def _local_spec(data: bytes = DATA, sha: bool = True) -> ModelSpec:
    return ModelSpec(name="tiny", role="detector", filename="tiny.onnx", urls=(),
                     size=len(data), sha256=hashlib.sha256(data).hexdigest() if sha else None,
                     licence="test", input_size=(64, 64))


@pytest.mark.parametrize(("content", "word"), [
    (b"", "empty"),
    (DATA[:1234], "too small: a cut-off download"),
    (b"<!DOCTYPE html><html><body>Rate limited</body></html>", "HTML page"),
])
def test_bad_files_fail_before_any_runtime(tmp_path: Path, content: bytes, word: str) -> None:
    spec = _local_spec()
    bad = tmp_path / "user.onnx"
    bad.write_bytes(content)
    models = tmp_path / "models"
    with pytest.raises(dl.ModelVerifyError, match=word):
        dl.import_model(bad, spec, models)
    assert not (models / "tiny.onnx").exists()
    models.mkdir()
    (models / "tiny.onnx").write_bytes(content)
    assert dl.status(spec, models) == "corrupt"


def test_same_size_wrong_bytes_is_corrupt(tmp_path: Path) -> None:
    spec = _local_spec()
    (tmp_path / "tiny.onnx").write_bytes(DATA[::-1])
    assert dl.status(spec, tmp_path) == "corrupt"
    with pytest.raises(dl.ModelVerifyError, match="SHA-256"):
        dl.import_model(tmp_path / "tiny.onnx", spec, tmp_path / "other")


def test_import_copies_after_verifying_and_keeps_source(tmp_path: Path) -> None:
    spec = _local_spec()
    src = tmp_path / "Downloads" / "inswapper copy.onnx"
    src.parent.mkdir()
    src.write_bytes(DATA)
    models = tmp_path / "models"
    out = dl.import_model(src, spec, models)
    assert out == models / "tiny.onnx" and out.read_bytes() == DATA
    assert src.read_bytes() == DATA
    assert [p.name for p in models.iterdir() if p.name.endswith(".part")] == []
    assert dl.status(spec, models) == "present"
    with pytest.raises(dl.ModelVerifyError, match="no such file"):
        dl.import_model(tmp_path / "nope.onnx", spec, models)


def test_status_missing_and_unverified(tmp_path: Path) -> None:
    assert dl.status(_local_spec(), tmp_path) == "missing"
    spec = _local_spec(sha=False)
    (tmp_path / "tiny.onnx").write_bytes(DATA)
    assert dl.status(spec, tmp_path) == "unverified"
    assert dl.status_text("unverified") == "unverified (no published hash)"


def test_status_reuses_cached_digest_until_file_changes(tmp_path: Path, monkeypatch) -> None:
    spec = _local_spec()
    path = tmp_path / "tiny.onnx"
    path.write_bytes(DATA)
    calls: list[Path] = []
    real = dl.sha256_file

    def counting(p: Path) -> str:
        calls.append(p)
        return real(p)

    monkeypatch.setattr(dl, "sha256_file", counting)
    assert dl.status(spec, tmp_path) == "present"
    assert dl.status(spec, tmp_path) == "present"
    assert len(calls) == 1
    path.write_bytes(DATA[::-1])  # same size, new mtime
    assert dl.status(spec, tmp_path) == "corrupt"
    assert len(calls) == 2


def test_require_checks_before_any_runtime(tmp_path: Path) -> None:
    spec = _local_spec()
    with pytest.raises(dl.ModelMissingError, match="livefuse models fetch tiny"):
        dl.require(spec, tmp_path)
    (tmp_path / "tiny.onnx").write_bytes(b"<html>502 Bad Gateway</html>")
    with pytest.raises(dl.ModelVerifyError, match="HTML page"):
        dl.require(spec, tmp_path)
    (tmp_path / "tiny.onnx").write_bytes(DATA)
    assert dl.require(spec, tmp_path) == tmp_path / "tiny.onnx"


def test_a_mask_model_row_downloads_like_the_swapper(server, tmp_path: Path) -> None:
    """A new catalog row (the GFPGAN enhancer) goes through the same verified, resumable path."""
    from livefuse.models.catalog import get_spec

    base, state = server
    state.cut_first[MODEL] = 1
    row = replace(get_spec("gfpgan_1.4"), urls=(base + "/model.onnx",), size=len(DATA),
                  sha256=hashlib.sha256(DATA).hexdigest())
    out = dl.download(row, tmp_path, attempts=2, progress=False)
    assert out == tmp_path / "GFPGANv1.4.onnx" and out.read_bytes() == DATA
    assert state.ranges[0] is None and state.ranges[1].startswith("bytes=")
    assert dl.status(row, tmp_path) == "present"
    assert dl.require(row, tmp_path) == out
