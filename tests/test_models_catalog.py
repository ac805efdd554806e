"""The model catalog and the `livefuse models` sub-commands (no network)."""

from __future__ import annotations

import argparse
import hashlib
import re
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from livefuse import models_cli
from livefuse.errors import LivefuseError
from livefuse.models import catalog
from livefuse.models import download as dl


def test_catalog_rows_carry_the_published_sizes_and_hashes() -> None:
    by_name = {s.name: s for s in catalog.CATALOG}
    assert set(by_name) == {"inswapper_128", "inswapper_128_fp16", "det_10g", "w600k_r50",
                            "2d106det", "xseg", "bisenet_resnet34", "gfpgan_1.4",
                            "gfpgan_1.4_facefusion", "gpen_bfr_512"}
    assert by_name["inswapper_128"].size == 554_253_681
    assert by_name["inswapper_128_fp16"].size == 277_680_638
    assert by_name["det_10g"].role == "detector" and by_name["det_10g"].input_size == (640, 640)
    assert by_name["w600k_r50"].role == "recogniser"
    assert by_name["w600k_r50"].input_size == (112, 112)
    lmk = by_name["2d106det"]
    assert (lmk.role, lmk.size, lmk.input_size, lmk.pack) == ("landmarker", 5_030_888, (192, 192),
                                                              "buffalo_l")
    assert lmk.sha256 == "f001b856447c413801ef5c42091ed0cd516fcd21f2d6b79635b1e733a7109dbf"
    for spec in catalog.CATALOG:
        assert spec.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
        assert spec.urls and all(u.startswith("https://") for u in spec.urls)
        assert len(set(spec.urls)) == len(spec.urls)
        assert spec.filename.endswith(".onnx")
        if spec.role in ("swapper", "detector", "recogniser", "landmarker"):
            assert "non-commercial" in spec.licence
    assert len({s.filename for s in catalog.CATALOG}) == len(catalog.CATALOG)
    assert len({s.sha256 for s in catalog.CATALOG}) == len(catalog.CATALOG)


def test_mask_and_enhancer_rows() -> None:
    """Published sizes and digests (read from two or more public manifests each, named in the
    rows' comments), licences and the graph contracts the code relies on."""
    by_name = {s.name: s for s in catalog.CATALOG}
    xseg, parser = by_name["xseg"], by_name["bisenet_resnet34"]
    assert (xseg.role, xseg.size, xseg.input_size) == ("occluder", 70_327_737, (256, 256))
    assert xseg.sha256 == "0b57328efcb839d85973164b617ceee9dfe6cfcb2c82e8a033bba9f4f09b27e5"
    assert "GPL-3.0" in xseg.licence and "NHWC" in xseg.layout
    assert (parser.role, parser.size, parser.input_size) == ("parser", 93_632_554, (512, 512))
    assert parser.sha256 == "5b805bba7b5660ab7070b5a381dcf75e5b3e04199f1e9387232a77a00095102e"
    assert "MIT" in parser.licence and "CelebAMask-HQ" in parser.licence
    assert "19" in parser.layout and "ImageNet" in parser.layout
    sizes = {"gfpgan_1.4": 340_256_690, "gfpgan_1.4_facefusion": 340_299_087,
             "gpen_bfr_512": 284_244_491}
    for name, size in sizes.items():
        spec = by_name[name]
        assert spec.role == "enhancer" and spec.size == size and spec.input_size == (512, 512)
        assert "[-1, 1]" in spec.layout and "ffhq_512" in spec.layout
    assert "Apache-2.0" in by_name["gfpgan_1.4"].licence
    assert "non-commercial" in by_name["gpen_bfr_512"].licence
    assert set(catalog.MASK_ROLES) == {s.role for s in catalog.CATALOG} - {
        "swapper", "detector", "recogniser", "landmarker"}
    # `livefuse models import ~/Downloads/GFPGANv1.4.onnx` finds its row by the file name
    assert catalog.get_spec("GFPGANv1.4.onnx") is by_name["gfpgan_1.4"]
    assert catalog.get_spec("GPEN-BFR-512") is by_name["gpen_bfr_512"]


def test_spec_is_frozen_and_lookup() -> None:
    spec = catalog.get_spec("det_10g")
    with pytest.raises(FrozenInstanceError):
        spec.size = 1  # type: ignore[misc]
    assert catalog.get_spec("det_10g.onnx") is spec
    with pytest.raises(catalog.UnknownModelError, match="known: inswapper_128") as err:
        catalog.get_spec("simswap")
    assert isinstance(err.value, LivefuseError)


def test_models_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(catalog.MODELS_DIR_ENV, raising=False)
    default = catalog.models_dir()
    assert default.name == "models" and "livefuse" in str(default)
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path / "env"))
    assert catalog.models_dir() == tmp_path / "env"
    assert catalog.models_dir(tmp_path / "flag") == tmp_path / "flag"
    assert catalog.model_path(catalog.get_spec("w600k_r50"), tmp_path) == \
        tmp_path / "w600k_r50.onnx"


def test_a_models_dir_variable_naming_a_file_is_refused_and_doctor_reports_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new user's trial: `LIVEFUSE_MODELS_DIR=<a file>` was taken (every model then "not
    installed", `models fetch` said "file exists"), where `--models-dir <a file>` is refused;
    `doctor` never named the models folder."""
    from livefuse.cli import main
    from livefuse.errors import ConfigError

    afile = tmp_path / "mfile"
    afile.write_text("")
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(afile))
    with pytest.raises(ConfigError, match=r"\$LIVEFUSE_MODELS_DIR='.*mfile' is a file"):
        catalog.models_dir()
    assert catalog.models_dir(tmp_path) == tmp_path  # the flag comes first
    assert main(["models", "list"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert main(["doctor"]) == 1
    report = capsys.readouterr().out
    assert report.startswith("[FAIL] models folder") and "is a file, not a folder" in report
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path))
    main(["doctor"])
    first = capsys.readouterr().out.splitlines()[0].split()
    assert first == ["[", "ok", "]", "models", "folder", str(tmp_path)], first


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    models_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _fake_catalog(monkeypatch: pytest.MonkeyPatch, data: bytes) -> catalog.ModelSpec:
    """det_10g re-described as ``data``, every URL (its pack's too) on a closed local port."""
    spec = replace(catalog.get_spec("det_10g"), size=len(data),
                   sha256=hashlib.sha256(data).hexdigest(), urls=("http://127.0.0.1:9/x",))
    rows = tuple(spec if s.name == "det_10g" else s for s in catalog.CATALOG)
    packs = tuple(replace(p, urls=(f"http://127.0.0.1:9/{p.filename}",)) for p in catalog.PACKS)
    monkeypatch.setattr(catalog, "CATALOG", rows)
    monkeypatch.setattr(catalog, "PACKS", packs)
    monkeypatch.setattr(models_cli, "CATALOG", rows)
    return spec


def test_list_shows_status_size_and_licence(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "w600k_r50.onnx").write_bytes(b"0" * 100)
    args = _parse(["models", "--models-dir", str(tmp_path), "list"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out
    lines = {ln.split()[0]: ln for ln in out.splitlines()[2:]}
    assert "528.6" in lines["inswapper_128"] and "missing" in lines["inswapper_128"]
    assert "corrupt" in lines["w600k_r50"]
    assert "non-commercial research" in lines["det_10g"]


def test_models_without_subcommand_lists_and_names_the_pack(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["models", "--models-dir", str(tmp_path)])
    assert args.func is models_cli.cmd_list
    assert args.func(args) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines()[2:]}
    assert "detector (buffalo_l)" in lines["det_10g"]
    assert "recogniser (buffalo_l)" in lines["w600k_r50"]
    assert "buffalo_l" not in lines["inswapper_128"]


def test_models_dir_flag_after_subcommand_and_env(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parse(["models", "list", "--models-dir", "/x"]).models_dir == "/x"
    assert _parse(["models", "--models-dir", "/y", "verify"]).models_dir == "/y"
    monkeypatch.setenv(catalog.MODELS_DIR_ENV, str(tmp_path))
    args = _parse(["models", "verify"])
    assert models_cli._dir(args) == tmp_path


def test_import_then_verify_via_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = b"synthetic-detector" * 1000
    _fake_catalog(monkeypatch, data)
    src = tmp_path / "my det.onnx"
    src.write_bytes(data)
    models = tmp_path / "models"
    args = _parse(["models", "--models-dir", str(models), "verify"])
    assert args.func(args) == 1  # none there: nothing verified is not "all good"
    assert "nothing to verify" in capsys.readouterr().out
    args = _parse(["models", "--models-dir", str(models), "import", str(src), "--name",
                   "det_10g"])
    assert args.func(args) == 0
    assert (models / "det_10g.onnx").read_bytes() == data
    args = _parse(["models", "--models-dir", str(models), "verify"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"det_10g\s+present", out)
    (models / "det_10g.onnx").write_bytes(data[::-1])
    assert args.func(args) == 1
    assert "livefuse models import PATH" in capsys.readouterr().out


def test_import_of_wrong_file_raises_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "inswapper_128.onnx"
    bad.write_bytes(b"<!DOCTYPE html><title>Error</title>")
    args = _parse(["models", "--models-dir", str(tmp_path / "m"), "import", str(bad)])
    with pytest.raises(dl.ModelVerifyError, match="HTML page"):
        args.func(args)


@pytest.mark.parametrize(("what", "said"), [
    ("missing", r"cannot import '.*missing\.onnx': file not found"),
    ("folder", r"cannot import '.*folder': it is a folder; give the model file"),
    ("unknown", r"cannot tell which model 'mine\.onnx' is: .* --name NAME"),
    ("unknown name", r"cannot import '.*mine\.onnx': --name 'nosuch' is not in the catalog"),
])
def test_import_says_what_is_wrong_with_the_path(tmp_path: Path, what: str, said: str) -> None:
    """A missing file or a folder was reported as "unknown model 'missing.onnx'"; a wrong
    --name was answered "say which with --name" (a new user's trial)."""
    path = {"missing": tmp_path / "missing.onnx", "folder": tmp_path / "folder",
            "unknown": tmp_path / "mine.onnx", "unknown name": tmp_path / "mine.onnx"}[what]
    if what == "folder":
        path.mkdir()
    elif what.startswith("unknown"):
        path.write_bytes(b"x" * 100)
    name = ["--name", "nosuch"] if what == "unknown name" else []
    args = _parse(["models", "--models-dir", str(tmp_path / "m"), "import", str(path), *name])
    with pytest.raises(LivefuseError, match=said):
        args.func(args)
    assert not (tmp_path / "m").exists()


def test_fetch_without_network_names_file_and_import(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_catalog(monkeypatch, b"x" * 10)
    args = _parse(["models", "--models-dir", str(tmp_path), "fetch", "det_10g",
                   "--timeout", "2"])
    with pytest.raises(dl.ModelDownloadError) as err:
        args.func(args)
    msg = str(err.value)
    assert "det_10g.onnx" in msg and "livefuse models import PATH" in msg
    # the pack's zip first, then the row's mirror; each named once
    assert msg.index("127.0.0.1:9/buffalo_l.zip") < msg.index("127.0.0.1:9/x")
    assert msg.count("127.0.0.1:9/x") == 1


def test_list_verbose_shows_digest_and_every_url(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["models", "list", "-v", "--models-dir", str(tmp_path)])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    for spec in catalog.CATALOG:
        assert spec.sha256 is not None and spec.sha256 in out
        for url in spec.urls:
            assert out.count(url) == 1, url
    pack = catalog.get_pack("buffalo_l")
    assert out.count(pack.urls[0]) == len(pack.members)  # listed under each member
    assert pack.sha256 is not None and pack.sha256 in out and "288,621,354 B" in out
    det = out[out.index("\ndet_10g ("):out.index("\nw600k_r50 (")]
    assert det.index(pack.urls[0]) < det.index(catalog.get_spec("det_10g").urls[0])
    args = _parse(["models", "list", "--models-dir", str(tmp_path)])
    args.func(args)
    assert "SHA-256" not in capsys.readouterr().out  # only with -v


def test_import_a_pack_zip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import zipfile

    det, rec, lmk = b"fake det" * 500, b"fake rec" * 700, b"fake lmk" * 300
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("det_10g.onnx", det)
        zf.writestr("w600k_r50.onnx", rec)
        zf.writestr("2d106det.onnx", lmk)
    blob = buf.getvalue()
    rows = tuple(replace(s, size=len(d), sha256=hashlib.sha256(d).hexdigest())
                 if (d := {"det_10g": det, "w600k_r50": rec, "2d106det": lmk}.get(s.name))
                 else s for s in catalog.CATALOG)
    pack = replace(catalog.get_pack("buffalo_l"), size=len(blob),
                   sha256=hashlib.sha256(blob).hexdigest())
    monkeypatch.setattr(catalog, "CATALOG", rows)
    monkeypatch.setattr(catalog, "PACKS", (pack,))
    src = tmp_path / "Downloads" / "buffalo_l.zip"
    src.parent.mkdir()
    src.write_bytes(blob)
    models = tmp_path / "models"
    args = _parse(["models", "--models-dir", str(models), "import", str(src)])
    assert args.func(args) == 0
    assert (models / "det_10g.onnx").read_bytes() == det
    assert (models / "w600k_r50.onnx").read_bytes() == rec
    assert (models / "2d106det.onnx").read_bytes() == lmk
    assert src.read_bytes() == blob  # the user's zip is left as it was
    assert "det_10g: present" in capsys.readouterr().out
    src.write_bytes(blob[:-1] + b"!")
    with pytest.raises(dl.ModelVerifyError, match=r"it is not buffalo_l\.zip"):
        args.func(args)
