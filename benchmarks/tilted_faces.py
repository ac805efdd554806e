"""Tilted faces (issue 18 item 4, issue 15 item 6): t1.jpg turned by each angle, swapped with
the astronaut by ``livefuse run``'s engine (``--rotation auto``, the default), then turned back and
checked with the independent checker (dlib's HOG, 68 points and 128-d descriptors, as
/work/shared/tools/facecheck.py): faces found and swapped, how many swapped faces are closer to
the source than to the person they replaced, the smallest margin, and the share of changed
pixels outside every face (a paste outside a face).

    python benchmarks/tilted_faces.py                        # 15 30 45 60 -30 90 180 270
    python benchmarks/tilted_faces.py --angles 30 --detector hog --out /tmp/tilted

The picture is turned on a canvas that holds all of it (black corners, as an editor's rotate
with "expand"); the original is turned and turned back the same way, so both sides of the
comparison went through the same two resamplings.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import cv2

from livefuse.config import EngineConfig
from livefuse.engine import Engine
from livefuse.faces.dlib_analyser import DlibFaceAnalyser
from livefuse.imaging import LoadedImage, load_image
from livefuse.samples import astronaut, insightface_image
from livefuse.testing.facecheck import FaceCheck
from livefuse.testing.tilted import turned, turned_back


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--angles", type=float, nargs="+",
                    default=[15, 30, 45, 60, -30, 90, 180, 270])
    ap.add_argument("--detector", choices=("auto", "centerface", "hog"), default="auto")
    ap.add_argument("--rotation", choices=("auto", "always", "off"), default="auto")
    ap.add_argument("--out", type=Path, help="write each output, turned back, here")
    args = ap.parse_args()
    t1 = load_image(insightface_image("t1.jpg")).bgr
    source = LoadedImage(bgr=astronaut(), alpha=None, path=Path("astronaut.png"))
    analyser = DlibFaceAnalyser(detector=args.detector)
    engine = Engine(EngineConfig(rotation=args.rotation), analyser=analyser)
    engine.set_source(source)
    check = FaceCheck()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    print(f"detector {analyser.detector}, --rotation {args.rotation}")
    print("| turned by | found | swapped | closer to the source | smallest margin | changed "
          "pixels outside the faces | seconds |")
    print("|---|---|---|---|---|---|---|")
    for degrees in args.angles:
        image, m = turned(t1, degrees)
        t0 = time.perf_counter()
        packet = engine.process_image(image)
        seconds = time.perf_counter() - t0
        assert packet.output is not None
        original = turned_back(image, m, t1.shape)
        swapped = turned_back(packet.output, m, t1.shape)
        margins = check.margins(source.bgr, original, swapped)
        closer = sum(x > 0 for x in margins)
        outside = check.outside_faces(original, swapped)
        print(f"| {degrees:g} | {packet.found} | {packet.swapped} | {closer}/{len(margins)} | "
              f"{min(margins):.3f} | {100 * outside:.1f} % | {seconds:.1f} |", flush=True)
        if args.out:
            cv2.imwrite(str(args.out / f"t1_turned_{degrees:g}.png"), swapped)


if __name__ == "__main__":
    main()
