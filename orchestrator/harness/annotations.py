"""Annotations as the tools the tests stand in for write them: a mask run-length encoded as pycocotools
encodes it (maskApi.c's rleEncode and rleToString), for COCO exports the tests make."""

from __future__ import annotations


def rle_of_mask(mask: list[list[int]], compressed: bool = True) -> dict:
    """COCO's `segmentation` for a mask (rows of 0/1): runs down the columns, starting with 0s; compressed as
    rleToString writes it (5-bit groups + 48, the third count on as the difference from the one two before)."""
    height, width = len(mask), len(mask[0])
    counts, value, run = [], 0, 0
    for bit in (mask[y][x] for x in range(width) for y in range(height)):
        if bit != value:
            counts.append(run)
            value, run = bit, 0
        run += 1
    counts.append(run)
    if not compressed:
        return {"size": [height, width], "counts": counts}
    text = []
    for i, x in enumerate(counts):
        x = x - counts[i - 2] if i > 2 else x
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            text.append(chr((c | 0x20 if more else c) + 48))
    return {"size": [height, width], "counts": "".join(text)}


def box_mask(width: int, height: int, x0: int, y0: int, x1: int, y1: int) -> list[list[int]]:
    """A mask of 1s on [x0, x1) x [y0, y1)."""
    return [[1 if x0 <= x < x1 and y0 <= y < y1 else 0 for x in range(width)] for y in range(height)]
