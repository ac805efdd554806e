"""A minimal ICC v2 matrix/TRC display profile, built in memory (test equipment: no profile file
ships with the packages here). ICC.1:2001-04 layout: a 128-byte header, a tag table, then the
tags ``desc``, ``wtpt``, ``rXYZ``/``gXYZ``/``bXYZ`` (primaries adapted to D50) and one gamma
curve per channel.
"""

from __future__ import annotations

import struct

DISPLAY_P3_D50 = ((0.5151, 0.2412, -0.0011), (0.2920, 0.6922, 0.0419),
                  (0.1571, 0.0666, 0.7841))
"""Display P3's red, green and blue primaries as XYZ, Bradford-adapted to D50 (the
``rXYZ``/``gXYZ``/``bXYZ`` tags of Apple's Display P3 profile)."""
_D50 = (0.9642, 1.0, 0.8249)


def _s15(v: float) -> bytes:
    return struct.pack(">i", round(v * 65536))


def _xyz(x: float, y: float, z: float) -> bytes:
    return b"XYZ " + bytes(4) + _s15(x) + _s15(y) + _s15(z)


def _curve(gamma: float) -> bytes:
    return b"curv" + bytes(4) + struct.pack(">IH", 1, round(gamma * 256))


def _desc(text: str) -> bytes:
    ascii_ = text.encode("ascii") + b"\0"
    # ASCII part, then empty Unicode and ScriptCode parts
    return b"desc" + bytes(4) + struct.pack(">I", len(ascii_)) + ascii_ + bytes(8 + 2 + 1 + 67)


def matrix_profile(name: str, primaries: tuple[tuple[float, float, float], ...] = DISPLAY_P3_D50,
                   gamma: float = 2.2) -> bytes:
    """The bytes of an RGB display profile called ``name`` with ``primaries`` (XYZ, D50) and a
    pure ``gamma`` curve: ``Image.save(..., icc_profile=matrix_profile("P3"))`` tags a picture."""
    tags = [(b"desc", _desc(name)), (b"wtpt", _xyz(*_D50))]
    tags += [(sig, _xyz(*xyz)) for sig, xyz in zip((b"rXYZ", b"gXYZ", b"bXYZ"), primaries,
                                                   strict=True)]
    tags += [(sig, _curve(gamma)) for sig in (b"rTRC", b"gTRC", b"bTRC")]
    tags.append((b"cprt", b"text" + bytes(4) + b"none\0"))
    start = 128 + 4 + 12 * len(tags)
    table, data = b"", b""
    for sig, body in tags:
        table += sig + struct.pack(">II", start + len(data), len(body))
        data += body + bytes(-len(body) % 4)
    header = (struct.pack(">I", start + len(data)) + b"lcms" + struct.pack(">I", 0x02100000)
              + b"mntrRGB XYZ " + bytes(12) + b"acspAPPL" + bytes(20) + struct.pack(">I", 0)
              + _s15(_D50[0]) + _s15(_D50[1]) + _s15(_D50[2]) + b"lcms" + bytes(44))
    assert len(header) == 128
    return header + struct.pack(">I", len(tags)) + table + data


__all__ = ["DISPLAY_P3_D50", "matrix_profile"]
