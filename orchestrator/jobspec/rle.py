"""COCO's run-length-encoded masks (`segmentation: {size: [h, w], counts: ...}`), as pycocotools' maskApi
writes them: runs of 0s and 1s down the columns (Fortran order), the counts either a list of integers
(uncompressed, `iscrowd` style) or a string (compressed: each count in 5-bit groups offset by 48, the third
count on stored as the difference from the count two before).

    rle_counts(seg)          the counts as integers (ValueError when the string is not such a code)
    rle_problem(seg, w, h)   why a mask cannot be this image's, or None (the plan's check, no numpy)
    rle_polygon(seg)         its largest outer contour as [x1, y1, x2, y2, ...] in pixels (numpy and OpenCV,
                             at conversion only; Ultralytics' converter traces the same contours)"""

from __future__ import annotations


def rle_counts(seg: dict) -> list[int]:
    counts = seg.get("counts")
    if isinstance(counts, list):
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise ValueError("counts hold a value that is not a count")
        return counts
    if isinstance(counts, bytes):
        counts = counts.decode("ascii", "replace")
    if not isinstance(counts, str):
        raise ValueError("counts are neither a list nor a compressed string")
    return _from_string(counts)


def _from_string(text: str) -> list[int]:
    """maskApi.c's rleFrString."""
    out: list[int] = []
    p = 0
    while p < len(text):
        x, k, more = 0, 0, True
        while more:
            if p >= len(text):
                raise ValueError("the compressed counts end inside a number")
            c = ord(text[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"{text[p]!r} is not a character of compressed counts")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(out) > 2:
            x += out[-2]
        out.append(x)
    if any(c < 0 for c in out):
        raise ValueError("the compressed counts decode to a negative run")
    return out


def rle_problem(seg: dict, width: float, height: float) -> str | None:
    size = seg.get("size")
    if not (isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) for v in size)):
        return f"its size {size!r} is not [height, width]"
    if (size[0], size[1]) != (int(height), int(width)):
        return f"its size {size} is not its image's [{int(height)}, {int(width)}]"
    try:
        counts = rle_counts(seg)
    except ValueError as exc:
        return str(exc)
    if sum(counts) != size[0] * size[1]:
        return f"its runs cover {sum(counts)} pixels, not the image's {size[0] * size[1]}"
    return None


def rle_polygon(seg: dict) -> list[float] | None:
    """The mask's largest outer contour (None: an empty mask, or one too thin for a polygon)."""
    import cv2
    import numpy as np

    height, width = seg["size"]
    flat = np.zeros(height * width, dtype=np.uint8)
    at, value = 0, 0
    for run in rle_counts(seg):
        flat[at:at + run] = value
        at, value = at + run, 1 - value
    mask = np.ascontiguousarray(flat.reshape(width, height).T)  # runs go down the columns
    contours = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)[0]
    largest = max(contours, key=cv2.contourArea, default=None)
    if largest is None or len(largest) < 3:
        return None
    return [float(v) for v in largest.reshape(-1)]
