"""Tilted faces, faces lying on their side and upside down: detect on the frame turned by
multiples of 45 degrees and map the faces back. One mechanism for every analyser (dlib/CenterFace
and SCRFD).

Face detectors are trained on roughly upright faces: dlib's HOG misses faces rolled past ~30
degrees, CenterFace's fast pass past ~45. A photo taken with the phone on its side, a head tilted
onto a shoulder or a streamer lying down then gets no swap. :func:`detect_rotated` runs the
detector on the frame turned by 45, 315, 90, 270, 135, 225 and 180 degrees (clockwise; the
turns nearest upright first), so that with a detector good to +-30 degrees every roll is covered,
and maps bbox, kps and landmarks back to the frame's own coordinates. A face keeps its semantic
point order (left eye first in the face's own frame), so alignment and the renderers work
unchanged, and ``Face.angle`` says at which turn it was found.

A turned detection is kept only when it is a face in its own right: its landmarks must be laid
out like a face inside its box (:func:`livefuse.faces.selection.plausible_face`), and it must not
overlap a face found upright (a detector that sees a face upright at one turn can see a false
face in its forehead and mouth upside down: a 180-degree detection scoring 0.04 over a real face
at IoU 0.31 pasted an upside-down mouth on a forehead, issue 15). Among turned detections of the
same face, the most confident wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Literal

import cv2
import numpy as np

from livefuse.faces.analyser import AnyFrame, host_frame
from livefuse.faces.selection import plausible_face
from livefuse.faces.tracking import overlap
from livefuse.types import Affine, Face, FloatArray, SkippedFace, StagedFrame

RotationMode = Literal["off", "auto", "always"]
"""``off``: upright only; ``auto``: the turned frames when no face is found upright, when a face
found upright is itself rolled past :data:`ROLLED_DEGREES` (the scene may be turned), when one
tilted past :data:`LOST_ROLL` on the frame before is missed, on a stream's first frame, and
always for a still image; in a video, the turns where a sweep found faces are then tried on the
next frames too, the others on every :data:`SWEEP_EVERY`-th (:class:`SweepPacer`); ``always``:
every turn at every detection (8x the detector's cost)."""
ANGLES = (45, 315, 90, 270, 135, 225, 180)
"""The turns tried (degrees clockwise), nearest upright first."""
QUARTER_TURNS = (90, 180, 270)
ROLLED_DEGREES = 45.0
RELIABLE_ROLL = 30.0
"""Degrees of roll, as the detector saw the face, within which every detector here is reliable
(HOG's limit; CenterFace's fast pass reaches ~45)."""
OVERLAP = 0.3
"""A turned detection whose box covers this share of a kept face's box (or is covered by it,
intersection over the smaller box) is the same face or a false one beside it."""
_CV_ROTATE = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180,
              270: cv2.ROTATE_90_COUNTERCLOCKWISE}


@lru_cache(maxsize=64)
def turn_affine(angle: int, size: tuple[int, int]) -> tuple[Affine, tuple[int, int]]:
    """The affine ``(2, 3) float64`` taking a frame of ``size = (width, height)`` to the frame
    turned clockwise by ``angle`` degrees, and the turned frame's ``(width, height)``.

    Quarter turns reproduce :func:`cv2.rotate`'s pixel mapping exactly (pixel centres on
    integers); other angles turn about the centre onto a canvas that holds the whole frame.
    """
    w, h = size
    a = angle % 360
    if a == 0:
        return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), (w, h)
    if a == 90:  # (x, y) -> (h - 1 - y, x)
        return np.array([[0.0, -1.0, h - 1.0], [1.0, 0.0, 0.0]]), (h, w)
    if a == 180:
        return np.array([[-1.0, 0.0, w - 1.0], [0.0, -1.0, h - 1.0]]), (w, h)
    if a == 270:  # (x, y) -> (y, w - 1 - x)
        return np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, w - 1.0]]), (h, w)
    t = np.radians(a)
    c, s = abs(np.cos(t)), abs(np.sin(t))
    out = (int(np.ceil(w * c + h * s)), int(np.ceil(w * s + h * c)))
    # OpenCV's positive angle turns counter-clockwise on screen (y points down)
    m = np.asarray(cv2.getRotationMatrix2D(((w - 1) / 2.0, (h - 1) / 2.0), -float(a), 1.0),
                   np.float64)
    m[:, 2] += np.array([(out[0] - w) / 2.0, (out[1] - h) / 2.0])
    return m, out


def rotate_frame(frame: AnyFrame, angle: int) -> AnyFrame:
    """``frame`` turned clockwise by ``angle`` degrees (a multiple of 45). A quarter turn of a
    staged frame is made on the host and, when it has one, on the device; other angles give a
    host frame (black outside the turned picture)."""
    host = host_frame(frame)
    if angle not in _CV_ROTATE:
        m, size = turn_affine(angle, (host.shape[1], host.shape[0]))
        return np.ascontiguousarray(cv2.warpAffine(host, m, size, flags=cv2.INTER_LINEAR),
                                    np.uint8)
    turned = np.ascontiguousarray(cv2.rotate(host, _CV_ROTATE[angle]), np.uint8)
    if not isinstance(frame, StagedFrame):
        return turned
    device = None
    if frame.device is not None:
        import torch

        # torch.rot90 turns counter-clockwise for positive k
        device = torch.rot90(frame.device, k=-(angle // 90), dims=(0, 1)).contiguous()
    return StagedFrame(host=turned, device=device)


def unrotate_points(points: FloatArray, angle: int, size: tuple[int, int]) -> FloatArray:
    """Points ``(N, 2)`` of the frame turned clockwise by ``angle`` mapped back to the frame,
    whose ``size`` is ``(width, height)``."""
    m, _ = turn_affine(angle, size)
    back = cv2.invertAffineTransform(m)
    p = np.asarray(points, np.float64).reshape(-1, 2)
    return (p @ back[:, :2].T + back[:, 2]).astype(np.float32)


def unrotate_face(face: Face, angle: int, size: tuple[int, int]) -> Face:
    """A face found on the frame turned by ``angle`` in the frame's own coordinates. Its box keeps
    its width and height (swapped for a quarter turn) about the mapped-back centre: a face's box
    does not grow because the picture was turned."""
    b = face.bbox
    centre = unrotate_points(np.array([[(b[0] + b[2]) / 2, (b[1] + b[3]) / 2]], np.float32),
                             angle, size)[0]
    w, h = float(b[2] - b[0]), float(b[3] - b[1])
    if angle % 180 == 90:
        w, h = h, w
    bbox = np.array([centre[0] - w / 2, centre[1] - h / 2, centre[0] + w / 2, centre[1] + h / 2],
                    np.float32)
    lm = None if face.landmarks is None else unrotate_points(face.landmarks, angle, size)
    return replace(face, bbox=bbox, kps=unrotate_points(face.kps, angle, size), landmarks=lm,
                   angle=angle)


def roll_degrees(face: Face) -> float:
    """The face's roll from its eye line, degrees in (-180, 180] (0: level, image-left eye
    first)."""
    d = face.kps[1] - face.kps[0]
    return float(np.degrees(np.arctan2(float(d[1]), float(d[0]))))


def needs_sweep(mode: RotationMode, upright: Sequence[Face], still: bool) -> bool:
    """Whether ``mode`` tries the turned frames after the upright pass found ``upright``."""
    if mode == "off":
        return False
    if mode == "always" or still or not upright:
        return True
    return any(abs(roll_degrees(f)) > ROLLED_DEGREES for f in upright)


SWEEP_EVERY = 8
"""On video, once no face at all was found for :data:`IDLE_FRAMES` frames in a row, the
faceless frames that follow sweep the turns only on frame indices that are multiples of this
(a turned face that appears is then found within about a quarter second at 30 fps), and of
this times :data:`LONG_PACE` in a long stretch (:data:`LONG_IDLE_FRAMES`). A sweep
runs the detector seven more times: a new user's clip with a face in its last second only ran
5.1 fps against 21.5 paced (docs/BENCHMARKS.md §13), so a season of streams with long faceless
stretches (a BRB screen, gameplay without a camera) paid it on every frame."""

IDLE_FRAMES = 30
"""Frames in a row with no face found (upright or turned) before the sweeps are paced: about a
second at 30 fps. A sideways face the detector misses for a frame or two (a blink, a hand) is
looked for again at once, as before; only a stretch with no face keeps the pace."""


LONG_IDLE_FRAMES = 120
"""Frames after :data:`IDLE_FRAMES` (4 s at 30 fps, 2 s at 60) after which a faceless stretch is a
long one (a BRB screen, gameplay without a camera): its frames sweep only on multiples of
:data:`SWEEP_EVERY` times :data:`LONG_PACE`."""

LONG_PACE = 4
"""How much rarer a long faceless stretch sweeps: every 32nd frame, about once a second at
30 fps, where a face that appears turned is then found. At every 8th frame a faceless 20 s clip
ran 1.9 detector passes a frame, 11.7 fps against 21.8 with ``--rotation off`` (a new user's
trial); every 32nd costs 1.2."""


class SweepPacer:
    """How ``auto`` sweeps a video's frames: when its faceless frames sweep (:data:`SWEEP_EVERY`,
    :data:`IDLE_FRAMES`), and which turns a sweep tries first (:attr:`turns`).

    Frame indices are the video's own, so in a long faceless stretch a chunk of the video
    processed on its own (``livefuse batch``) sweeps on the frames one run over the whole video
    sweeps on. A chunk starts unpaced, and its first frame sweeps every turn
    (:meth:`first_look`): it can find a turned face that appears in its first seconds up to
    ``every * LONG_PACE - 1`` frames sooner than one run over the whole video, or a sideways
    face beside upright ones that run found only at its next sweep. One per video
    stream; used by the thread that detects (the engine's processing thread).

    Attributes:
        turns: the turns (degrees clockwise, of :data:`ANGLES`) at which the last full sweep
            kept faces, and ``faces``, how many it kept (upright ones too). A phone clip whose
            pictures are stored on their side (the display matrix turns them for the viewer)
            has every face rolled a quarter turn: each frame then needs the sweep, and trying
            these turns first saves the other six detector passes (:func:`detect_rotated`).
        seen: the faces the last full sweep kept.
    """

    def __init__(self, every: int = SWEEP_EVERY, idle: int = IDLE_FRAMES) -> None:
        self.every = max(1, int(every))
        self.idle = max(1, int(idle))
        self._last: int | None = None  # the index of the last frame where a face was found
        self._first: int | None = None  # the first index seen since the last reset
        self.turns: tuple[int, ...] = ()
        self.faces = 0
        self.seen: list[Face] = []
        self._full: int | None = None  # the index of the last full sweep

    def skip(self, index: int) -> bool:
        """Whether the faceless frame ``index`` goes without a sweep."""
        if self._first is None:
            self._first = index
        since = index - (self._first if self._last is None else self._last)
        if since <= self.idle:
            return False
        # multiples of the longer pace are multiples of the shorter: a chunk of the video
        # still sweeps on frames one run over the whole video sweeps on
        pace = self.every * (LONG_PACE if since > self.idle + LONG_IDLE_FRAMES else 1)
        return index % pace != 0

    def first_look(self) -> bool:
        """Whether no frame of this stream was looked at yet: its first frame sweeps every
        turn even when faces are found upright, so that a person lying down beside an upright
        one is found from the start (a new user's trial: from frame 29, the first that swept)
        and then looked for at that turn on every frame (:attr:`turns`)."""
        return self._first is None and self._full is None

    def found(self, index: int, any_face: bool) -> None:
        """What frame ``index``'s detection found (upright or in a sweep)."""
        if self._first is None:
            self._first = index
        if any_face:
            self._last = index

    def full_sweep(self, index: int) -> bool:
        """Whether frame ``index`` sweeps every turn even when :attr:`turns` find its faces:
        on every :data:`SWEEP_EVERY`-th frame, so that a face appearing at another turn is found
        within about a quarter second at 30 fps, and on any frame ``every`` or more after the
        last full sweep (with ``--detect-every 2`` the detecting frames may all be odd: a
        review found a turn remembered for ever)."""
        return not self.turns or index % self.every == 0 or self._full is None or \
            not 0 <= index - self._full < self.every

    def swept(self, index: int) -> None:
        """Frame ``index`` swept every turn."""
        self._full = index

    def reset(self) -> None:
        self._last = self._first = None
        self.turns, self.faces, self.seen, self._full = (), 0, [], None


def _rank(face: Face, roll_in_view: float) -> tuple[int, float]:
    """Sort key, best first: how near upright the detector saw the face (within
    :data:`RELIABLE_ROLL`, within twice that, beyond), then its score."""
    r = abs(roll_in_view)
    return (0 if r <= RELIABLE_ROLL else 1 if r <= 2 * RELIABLE_ROLL else 2), -face.score


def detect_rotated(detect: Callable[[AnyFrame], list[Face]], frame: AnyFrame,
                   mode: RotationMode, upright: Sequence[Face] | None = None,
                   still: bool = False, dropped: list[SkippedFace] | None = None,
                   pacer: SweepPacer | None = None, index: int = 0,
                   expected: Sequence[Face] = ()) -> list[Face]:
    """Faces at any roll, per ``mode`` (see :data:`RotationMode`).

    When the turns are tried, each face is taken from the pass that saw it best: the detections
    of all passes are ranked by how near upright the detector saw the face (:func:`_rank`), then
    by score, and each is kept unless it overlaps (:data:`OVERLAP`) a face kept before it. So a
    turned detection over a face found upright is dropped (the face was seen upright, with a
    higher score), and a face the upright pass saw upside down or as a small false face inside
    it is taken from the turn that shows it upright. Detections that were not seen upright must
    also be laid out like a face (:func:`~livefuse.faces.selection.plausible_face`).

    Args:
        detect: the analyser's detector.
        frame: the frame, host or staged.
        upright: the upright detections when the caller already has them.
        still: the frame is a still image (``auto`` then always tries the turns).
        dropped: when given, detections dropped because their landmarks do not fit a face (and
            overlapping no kept face) are appended, with why.
        pacer: a video's :class:`SweepPacer`: in ``auto``, the stream's first frame sweeps
            every turn; a frame where the upright pass found no face sweeps the turns only
            when it says so (``None``: every such frame); a frame whose upright faces look
            right is swept at the turns where the last full sweep found faces, the upright
            faces standing (:func:`_upright_stand`); and a
            sweep tries its :attr:`~SweepPacer.turns` first: when they and the upright pass give
            as many faces as the last full sweep, all seen near upright (:func:`_steady`), and
            each turned one continues a face of the last full sweep (:func:`_continues`), the
            other turns are not tried (except on :meth:`~SweepPacer.full_sweep` frames).
        index: the frame's index in the video (for ``pacer``).
        expected: the target faces of the stream's previous frame (the tracker's): with a
            ``pacer``, a frame whose upright pass misses one of them that was tilted past
            :data:`LOST_ROLL` sweeps every turn (:func:`_lost_tilted`).

    Returns:
        Faces in ``frame`` coordinates, left to right.
    """
    faces = list(upright) if upright is not None else detect(frame)
    paced = pacer if mode == "auto" and not still else None
    looked_right = not needs_sweep(mode, faces, still)
    first = paced is not None and paced.first_look()
    lost = paced is not None and _lost_tilted(expected, faces)
    # a face the last sweep found at a turn is looked for there even when the upright pass
    # found faces: a face lying on its side can show the detector a small false face upright
    # (its nose and eyes), which then stood in for it (a new user's trial: a mini-face pasted
    # on the nose of a phone clip stored turned clockwise, exit 0); and a sideways person
    # beside an upright one was swapped only on the frames that happened to sweep
    if not (first or lost or (paced is not None and paced.turns)) and (
            looked_right or
            (paced is not None and not faces and paced.skip(index))):
        if paced is not None:
            paced.found(index, bool(faces))
        return faces
    h, w = host_frame(frame).shape[:2]
    seen = [(f, roll_degrees(f)) for f in faces]

    def look(angle: int) -> None:
        seen.extend((unrotate_face(f, angle, (w, h)), roll_degrees(f))
                    for f in detect(rotate_frame(frame, angle)))

    def keep() -> tuple[list[tuple[Face, float]], list[SkippedFace]]:
        kept, misfits = _keep(seen)
        return (_upright_stand(kept, faces) if looked_right else kept), misfits

    turns = list(ANGLES)
    # a face lost to its tilt may lie at any turn, not only the remembered ones
    if paced is not None and not lost and not paced.full_sweep(index):
        for angle in paced.turns:
            look(angle)
            turns.remove(angle)
        kept, misfits = keep()
        # an upright face that looked right stands as on a frame not swept; a turned one must
        # be seen near upright and continue a face of the last full sweep
        if len(kept) >= max(1, paced.faces) and all(
                (looked_right or _steady(f, roll)) if f.angle == 0 else
                (_steady(f, roll) and _continues(f, paced.seen)) for f, roll in kept):
            return _done(kept, misfits, dropped, paced, index)
    for angle in turns:
        look(angle)
    kept, misfits = keep()
    if paced is not None:
        paced.turns = tuple(a for a in ANGLES if any(f.angle == a for f, _ in kept))
        paced.faces = len(kept)
        paced.seen = [f for f, _ in kept]
        paced.swept(index)
    return _done(kept, misfits, dropped, paced, index)


def _upright_stand(kept: list[tuple[Face, float]], upright: Sequence[Face]
                   ) -> list[tuple[Face, float]]:
    """``kept`` with the upright pass's faces back in place of the turned detections of the same
    faces, for a frame whose upright faces looked right (:func:`needs_sweep`) and was swept
    only to look for others (a stream's first frame, :meth:`SweepPacer.first_look`; a turn
    remembered): as on a frame that is not swept. A head tilted 30
    degrees is seen better at the 45-degree turn, and taking it from there made the first
    frame's sweep remember that turn: two detector passes a frame and no tracking (turned faces
    are detected on every frame), where the upright face served. A turned face that holds an
    upright one (:func:`_holds`: a small false face inside a face lying on its side) stays."""
    out: list[tuple[Face, float]] = []
    for face, roll in kept:
        same = [u for u in upright if overlap(face.bbox, u.bbox) >= OVERLAP]
        if face.angle == 0 or not same or any(_holds(face, roll, u) for u in same):
            pairs = [(face, roll)]
        else:
            pairs = [(u, roll_degrees(u)) for u in same]
        out += [(f, r) for f, r in pairs if not any(f is g for g, _ in out)]
    return out


LOST_ROLL = 25.0
"""Degrees of roll (from the face's landmarks) past which a face the upright pass misses may be
lost to its tilt (near the detectors' reliable roll, :data:`RELIABLE_ROLL`) rather than to a
hand or the frame's edge: the frame then sweeps the turns."""


def _lost_tilted(expected: Sequence[Face], upright: Sequence[Face]) -> bool:
    """Whether a face of ``expected`` found upright and tilted past :data:`LOST_ROLL` is missing
    from ``upright``. The detector loses such a face for frames at a time, where a turn sees it
    upright (a new user's trial: two of six faces of a group shot tilted 35 degrees went
    unswapped for up to 9 frames, exit 0, while the frames' other faces looked right)."""
    return any(f.angle == 0 and abs(roll_degrees(f)) > LOST_ROLL and
               not any(overlap(f.bbox, g.bbox) >= OVERLAP for g in upright)
               for f in expected)


def _steady(face: Face, roll: float) -> bool:
    """Whether a kept face was seen near enough upright (within :data:`RELIABLE_ROLL`, the
    first rank of :func:`_rank`) that no other turn could see it better."""
    return abs(roll) <= RELIABLE_ROLL


SCORE_KEPT = 0.5
"""A turned face found without the full sweep keeps at least this share of the score its face
had in the last full sweep."""


def _continues(face: Face, seen: Sequence[Face]) -> bool:
    """Whether ``face``, found at a turn tried first, continues a face of the last full sweep:
    the same turn, overlapping it (:data:`OVERLAP`), with :data:`SCORE_KEPT` of its score (of
    the full sweep's, so that a score cannot halve frame after frame). A phone
    turned over puts the face at the opposite turn, where the turn tried first can see a false
    face in it (issue 15's upside-down mouth, scoring 0.04): the full sweep, which finds the
    face upright at the other turn, drops that one; this sends such a frame to it."""
    return any(g.angle == face.angle and overlap(face.bbox, g.bbox) >= OVERLAP and
               face.score >= SCORE_KEPT * g.score for g in seen)


def _keep(seen: list[tuple[Face, float]]
          ) -> tuple[list[tuple[Face, float]], list[SkippedFace]]:
    """The faces kept from every pass's detections (each with its roll as the detector saw it),
    best first, and the detections dropped because their landmarks do not fit a face."""
    kept: list[tuple[Face, float]] = []
    misfits = []
    for face, roll in sorted(seen, key=lambda fr: _rank(*fr)):
        hit = [k for k, (g, _) in enumerate(kept) if overlap(face.bbox, g.bbox) >= OVERLAP]
        inner = [k for k in hit if _holds(face, roll, kept[k][0])]
        if hit and inner != hit:
            continue  # the same face seen worse, or a false one in it
        why = None if (face.angle == 0 and abs(roll) <= RELIABLE_ROLL) else plausible_face(face)
        if why is not None:
            if not hit:
                misfits.append(SkippedFace(face.bbox, f"its landmarks do not fit a face "
                                           f"({why})", face.angle, face.score))
            continue
        kept = [kg for k, kg in enumerate(kept) if k not in inner]
        kept.append((face, roll))
    return kept, misfits


HELD_AREA = 0.4
"""A kept face whose box is under this share of another detection's area, and inside it, can be
a false face in that one (see :func:`_holds`)."""


def _holds(face: Face, roll: float, small: Face) -> bool:
    """Whether ``face``, seen at another turn than ``small`` and within the detector's reliable
    roll, holds ``small``: a box under :data:`HELD_AREA` of its area, four fifths inside it. A
    face lying on its side can show the upright pass a small false face (its nose and eyes)
    that outscores the face itself seen upright at its turn (a review: 0.85 against 0.80); the
    whole face is then kept, not the part. Faces seen at one turn are left to the detector."""
    if face.angle == small.angle or abs(roll) > RELIABLE_ROLL:
        return False
    a, b = face.bbox, small.bbox
    area = float((a[2] - a[0]) * (a[3] - a[1]))
    inner = float((b[2] - b[0]) * (b[3] - b[1]))
    w = max(0.0, float(min(a[2], b[2]) - max(a[0], b[0])))
    h = max(0.0, float(min(a[3], b[3]) - max(a[1], b[1])))
    return 0 < inner < HELD_AREA * area and w * h >= 0.8 * inner


def _done(kept: list[tuple[Face, float]], misfits: list[SkippedFace],
          dropped: list[SkippedFace] | None, paced: SweepPacer | None, index: int) -> list[Face]:
    """The kept faces left to right; the misfits overlapping none of them reported."""
    faces = sorted((f for f, _ in kept), key=lambda f: float(f.bbox[0] + f.bbox[2]))
    if dropped is not None:
        dropped += [m for m in misfits
                    if not any(overlap(m.bbox, g.bbox) >= OVERLAP for g in faces)]
    if paced is not None:
        paced.found(index, bool(faces))
    return faces


__all__ = ["ANGLES", "IDLE_FRAMES", "LONG_IDLE_FRAMES", "LONG_PACE", "LOST_ROLL", "OVERLAP",
           "QUARTER_TURNS",
           "RELIABLE_ROLL", "ROLLED_DEGREES", "SCORE_KEPT", "SWEEP_EVERY",
           "RotationMode", "SweepPacer", "detect_rotated", "needs_sweep", "roll_degrees",
           "rotate_frame", "turn_affine", "unrotate_face", "unrotate_points"]
