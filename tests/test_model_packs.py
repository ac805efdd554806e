"""det_10g and w600k_r50 come from InsightFace's buffalo_l zip; mirrors only after it fails.

A loopback HTTP server serves a zip built here from small fake members, with a catalog patched
to describe those fake files (their digests are computed from the test's own bytes).
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from loopback_http import Served, serve

from livefuse import models_cli
from livefuse.models import catalog
from livefuse.models import download as dl
from livefuse.models.archive import install_members

DET = np.random.default_rng(1).integers(0, 256, 40_000, dtype=np.uint8).tobytes()
REC = np.random.default_rng(2).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
LMK = np.random.default_rng(3).integers(0, 256, 20_000, dtype=np.uint8).tobytes()


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# like the real buffalo_l.zip: the wanted members beside others the catalog does not want
ZIP = make_zip({"det_10g.onnx": DET, "w600k_r50.onnx": REC, "2d106det.onnx": LMK,
                "genderage.onnx": b"other" * 99})


@pytest.fixture
def server() -> Iterator[tuple[str, Served]]:
    state = Served(files={"/pack/buffalo_l.zip": ZIP, "/mirror/det_10g.onnx": DET,
                          "/mirror/w600k_r50.onnx": REC})
    with serve(state) as base:
        yield base, state


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake_catalog(server: tuple[str, Served],
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, catalog.ModelSpec]:
    """The real rows and pack, re-pointed at the loopback server and the fake files."""
    base, _ = server
    rows = []
    for spec in catalog.CATALOG:
        data = {"det_10g": DET, "w600k_r50": REC, "2d106det": LMK}.get(spec.name)
        if data is not None:
            spec = replace(spec, size=len(data), sha256=_sha(data),
                           urls=(f"{base}/mirror/{spec.filename}",))
        rows.append(spec)
    pack = replace(catalog.get_pack("buffalo_l"), urls=(f"{base}/pack/buffalo_l.zip",),
                   size=len(ZIP), sha256=_sha(ZIP))
    monkeypatch.setattr(catalog, "CATALOG", tuple(rows))
    monkeypatch.setattr(catalog, "PACKS", (pack,))
    monkeypatch.setattr(models_cli, "CATALOG", tuple(rows))
    return {s.name: s for s in rows}


def test_the_real_pack_row() -> None:
    pack = catalog.get_pack("buffalo_l")
    assert pack.urls[0] == ("https://github.com/deepinsight/insightface/releases/download/v0.7/"
                            "buffalo_l.zip")
    assert pack.size == 288_621_354
    assert pack.sha256 == "80ffe37d8a5940d59a7384c201a2a38d4741f2f3c51eef46ebb28218a7b0ca2f"
    assert pack.members == ("det_10g", "w600k_r50", "2d106det")
    assert "non-commercial" in pack.licence
    for name in pack.members:
        spec = catalog.get_spec(name)
        assert spec.pack == "buffalo_l" and "huggingface.co" in spec.urls[0]  # mirrors only
    assert catalog.get_pack("buffalo_l.zip") is pack
    with pytest.raises(catalog.UnknownPackError, match="antelopev2"):
        catalog.get_pack("antelopev2")


def test_one_fetch_installs_both_members_from_the_zip(
        server: tuple[str, Served], fake_catalog: dict[str, catalog.ModelSpec],
        tmp_path: Path) -> None:
    _, state = server
    det, rec = fake_catalog["det_10g"], fake_catalog["w600k_r50"]
    out = dl.download(det, tmp_path, progress=False)
    assert out == tmp_path / "det_10g.onnx" and out.read_bytes() == DET
    assert (tmp_path / "w600k_r50.onnx").read_bytes() == REC
    assert (tmp_path / "2d106det.onnx").read_bytes() == LMK
    assert dl.status(det, tmp_path) == "present" and dl.status(rec, tmp_path) == "present"
    assert [p for p, _ in state.requests] == ["/pack/buffalo_l.zip"]  # no mirror touched
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        dl.CACHE_NAME, "2d106det.onnx", "det_10g.onnx", "w600k_r50.onnx"]  # zip, parts and
    # genderage gone
    dl.download(rec, tmp_path, progress=False)
    assert len(state.requests) == 1  # already installed: nothing fetched


def test_zip_download_resumes_after_a_cut(server: tuple[str, Served],
                                          fake_catalog: dict[str, catalog.ModelSpec],
                                          tmp_path: Path) -> None:
    _, state = server
    state.cut_first["/pack/buffalo_l.zip"] = 1
    state.status["/mirror/det_10g.onnx"] = 503  # the fallback is down too this time
    with pytest.raises(dl.ModelDownloadError):
        dl.download(fake_catalog["det_10g"], tmp_path, attempts=1, progress=False)
    kept = (tmp_path / "buffalo_l.zip.part").stat().st_size
    assert 0 < kept < len(ZIP)
    del state.status["/mirror/det_10g.onnx"]
    state.requests.clear()
    dl.download(fake_catalog["det_10g"], tmp_path, attempts=1, progress=False)
    assert state.requests == [("/pack/buffalo_l.zip", f"bytes={kept}-")]
    assert (tmp_path / "det_10g.onnx").read_bytes() == DET


def test_mirror_is_used_only_after_the_zip_fails(server: tuple[str, Served],
                                                 fake_catalog: dict[str, catalog.ModelSpec],
                                                 tmp_path: Path) -> None:
    _, state = server
    state.status["/pack/buffalo_l.zip"] = 404
    out = dl.download(fake_catalog["det_10g"], tmp_path, progress=False)
    assert out.read_bytes() == DET
    assert [p for p, _ in state.requests] == ["/pack/buffalo_l.zip", "/mirror/det_10g.onnx"]
    assert not (tmp_path / "w600k_r50.onnx").exists()  # per file: only what was asked


def test_corrupt_zip_is_deleted_and_the_mirror_used(
        server: tuple[str, Served], fake_catalog: dict[str, catalog.ModelSpec],
        tmp_path: Path) -> None:
    _, state = server
    state.files["/pack/buffalo_l.zip"] = ZIP[::-1]  # right size, wrong bytes
    out = dl.download(fake_catalog["det_10g"], tmp_path, progress=False)
    assert out.read_bytes() == DET
    assert [p for p, _ in state.requests] == ["/pack/buffalo_l.zip", "/mirror/det_10g.onnx"]
    assert not [p for p in tmp_path.iterdir() if "buffalo_l" in p.name]


def test_a_member_that_does_not_match_its_row_is_not_installed(
        server: tuple[str, Served], fake_catalog: dict[str, catalog.ModelSpec],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, state = server
    bad = make_zip({"buffalo_l/det_10g.onnx": DET[::-1], "buffalo_l/w600k_r50.onnx": REC,
                    "buffalo_l/2d106det.onnx": LMK})
    state.files["/pack/buffalo_l.zip"] = bad
    monkeypatch.setattr(catalog, "PACKS", (replace(catalog.PACKS[0], size=len(bad),
                                                   sha256=_sha(bad)),))
    state.status["/mirror/det_10g.onnx"] = 404
    with pytest.raises(dl.ModelDownloadError) as err:
        dl.download(fake_catalog["det_10g"], tmp_path, progress=False)
    msg = str(err.value)
    assert "buffalo_l.zip/det_10g.onnx: det_10g.onnx in the archive has SHA-256" in msg
    assert f"{base}/mirror/det_10g.onnx: HTTP 404" in msg
    assert not (tmp_path / "det_10g.onnx").exists()  # never under its final name
    assert (tmp_path / "w600k_r50.onnx").read_bytes() == REC  # the good member is kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [dl.CACHE_NAME, "2d106det.onnx",
                                                          "w600k_r50.onnx"]


def test_install_members_refuses_missing_oversized_and_duplicate_members(
        tmp_path: Path, fake_catalog: dict[str, catalog.ModelSpec]) -> None:
    det, rec = fake_catalog["det_10g"], fake_catalog["w600k_r50"]
    archive = tmp_path / "p.zip"
    archive.write_bytes(make_zip({"det_10g.onnx": DET + b"x", "a/w600k_r50.onnx": REC,
                                  "b/w600k_r50.onnx": REC}))
    results = install_members(archive, [det, rec], tmp_path / "m")
    assert [r.path for r in results] == [None, None]
    assert "40,001 B, expected 40,000 B" in str(results[0].problem)
    assert "2 files called w600k_r50.onnx" in str(results[1].problem)
    archive.write_bytes(b"PK not a zip")
    assert "not a readable zip" in str(install_members(archive, [det], tmp_path)[0].problem)
    assert not (tmp_path / "m" / "det_10g.onnx").exists()


def _fetch_cli(tmp_path: Path, name: str) -> int:
    parser = models_cli.argparse.ArgumentParser()
    models_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", "--models-dir", str(tmp_path), "fetch", name,
                              "--timeout", "5"])
    return int(args.func(args))


def test_fetch_prints_each_url_once(server: tuple[str, Served],
                                    fake_catalog: dict[str, catalog.ModelSpec], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    base, state = server
    state.status["/pack/buffalo_l.zip"] = 503  # retried: three requests, one URL
    state.status["/mirror/det_10g.onnx"] = 502
    with pytest.raises(dl.ModelDownloadError) as err:
        _fetch_cli(tmp_path, "det_10g")
    assert len(state.requests) == 6
    out = capsys.readouterr().out
    for url in (f"{base}/pack/buffalo_l.zip", f"{base}/mirror/det_10g.onnx"):
        assert out.count(url) == 1, out
        assert str(err.value).count(url) == 1
    assert "(3 attempts)" in str(err.value)


def test_fetch_all_downloads_the_zip_once(server: tuple[str, Served],
                                          fake_catalog: dict[str, catalog.ModelSpec],
                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    _, state = server
    rows = tuple(s for s in catalog.CATALOG if s.pack == "buffalo_l")
    monkeypatch.setattr(catalog, "CATALOG", rows)
    monkeypatch.setattr(models_cli, "CATALOG", rows)
    assert _fetch_cli(tmp_path, "all") == 0
    assert [p for p, _ in state.requests] == ["/pack/buffalo_l.zip"]
    out = capsys.readouterr().out
    assert re.search(r"det_10g: present -> ", out) and re.search(r"w600k_r50: present -> ", out)
