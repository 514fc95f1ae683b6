"""Drawing the synthetic shapes: one filled shape in a box (its anti-aliased mask and its outline),
optionally rotated, on a noisy two-colour background. Deterministic for a given random stream.
numpy and Pillow only."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

# Class id -> shape kind. `classes=k` uses the first k.
SHAPE_NAMES: tuple[str, ...] = (
    "rectangle",
    "ellipse",
    "triangle",
    "cross",
    "star",
    "diamond",
    "ring",
    "hexagon",
)

# Data design constants (part of the generator version).
MIN_SIZE, MAX_SIZE = 0.15, 0.50  # object box side, fraction of the image side
_MAX_ASPECT = 1.4  # long side / short side of an object box
_GAP = 2  # pixels kept free between two object boxes
_PLACE_TRIES = 40  # random placements tried per object before giving up on it
_SUPERSAMPLE = 4  # shapes are drawn at this scale and downsampled (anti-aliased edges)
NOISE_SIGMA = 18.0  # per-pixel Gaussian noise over the whole image
_BG_GRADIENT = 40.0  # spread (per channel) between the two background gradient colours
_MIN_CONTRAST = 110.0  # min RGB distance between an object colour and the background mean
_ELLIPSE_POINTS = 32  # vertices of an ellipse's outline (segment labels)

Box = tuple[int, int, int, int]  # pixel edges x0, y0, x1, y1


def _polygon(kind: str, x0: float, y0: float, x1: float, y1: float, rng: np.random.Generator):
    """Vertices of a polygonal shape filling the box [x0, x1] x [y0, y1]."""
    w, h = x1 - x0, y1 - y0
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    if kind == "triangle":
        # Isosceles, apex up or down (random), base on the opposite box edge.
        if rng.random() < 0.5:
            return [(cx, y0), (x1, y1), (x0, y1)]
        return [(x0, y0), (x1, y0), (cx, y1)]
    if kind == "diamond":
        return [(cx, y0), (x1, cy), (cx, y1), (x0, cy)]
    if kind == "hexagon":
        # Pointy sides left/right; x at 0, 1/4, 3/4, 1 of the width.
        return [
            (x0, cy), (x0 + w / 4, y0), (x1 - w / 4, y0),
            (x1, cy), (x1 - w / 4, y1), (x0 + w / 4, y1),
        ]
    if kind == "star":
        # Five-pointed star, point up, scaled to fill the box exactly.
        outer, inner = 1.0, 0.45
        pts = []
        for k in range(10):
            r = outer if k % 2 == 0 else inner
            a = -math.pi / 2 + k * math.pi / 5
            pts.append((r * math.cos(a), r * math.sin(a)))
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        mx0, mx1, my0, my1 = min(xs), max(xs), min(ys), max(ys)
        return [
            (x0 + (px - mx0) / (mx1 - mx0) * w, y0 + (py - my0) / (my1 - my0) * h)
            for px, py in pts
        ]
    if kind == "cross":
        t = rng.uniform(0.28, 0.4)  # bar thickness, fraction of the side
        ax0, ax1 = cx - w * t / 2, cx + w * t / 2
        ay0, ay1 = cy - h * t / 2, cy + h * t / 2
        return [
            (ax0, y0), (ax1, y0), (ax1, ay0), (x1, ay0), (x1, ay1), (ax1, ay1),
            (ax1, y1), (ax0, y1), (ax0, ay1), (x0, ay1), (x0, ay0), (ax0, ay0),
        ]
    raise AssertionError(kind)


def draw_shape(kind: str, box: Box, size: int, rng, angle: float = 0.0) -> tuple[Image.Image, list[tuple[float, float]]]:
    """One shape filling `box`: its 8-bit mask (size x size, supersampled then downsampled) and its
    outline polygon in pixel coordinates. `angle` (degrees, counter-clockwise as seen) rotates both
    about the box centre."""
    s = _SUPERSAMPLE
    mask = Image.new("L", (size * s, size * s), 0)
    d = ImageDraw.Draw(mask)
    x0, y0, x1, y1 = (v * s for v in box)
    # PIL fills inclusive pixel ranges: the last filled pixel is x1-1.
    hx1, hy1 = x1 - 1, y1 - 1
    if kind == "rectangle":
        d.rectangle([x0, y0, hx1, hy1], fill=255)
        outline = [(x0, y0), (hx1, y0), (hx1, hy1), (x0, hy1)]
    elif kind in ("ellipse", "ring"):
        d.ellipse([x0, y0, hx1, hy1], fill=255)
        outline = _ellipse_outline(x0, y0, hx1, hy1)  # a ring's hole is not in its polygon
        if kind == "ring":
            t = rng.uniform(0.45, 0.6)  # hole size relative to the outer ellipse
            w, h = x1 - x0, y1 - y0
            ix0, iy0 = x0 + w * (1 - t) / 2, y0 + h * (1 - t) / 2
            d.ellipse([ix0, iy0, ix0 + w * t, iy0 + h * t], fill=0)
    else:
        outline = _polygon(kind, x0, y0, hx1, hy1, rng)
        d.polygon(outline, fill=255)
    if angle:
        centre = ((x0 + x1) / 2, (y0 + y1) / 2)
        mask = mask.rotate(angle, resample=Image.Resampling.BILINEAR, center=centre)
        outline = rotate_points(outline, centre, angle)
    return mask.resize((size, size), Image.Resampling.BOX), [(x / s, y / s) for x, y in outline]


def _ellipse_outline(x0: float, y0: float, x1: float, y1: float) -> list[tuple[float, float]]:
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    return [(cx + rx * math.cos(a), cy + ry * math.sin(a))
            for a in (2 * math.pi * i / _ELLIPSE_POINTS for i in range(_ELLIPSE_POINTS))]


def rotate_points(points, centre: tuple[float, float], angle: float) -> list[tuple[float, float]]:
    """The points as PIL's Image.rotate(angle, center=centre) moves pixels: counter-clockwise as seen
    (image y points down)."""
    a = math.radians(angle)
    c, s = math.cos(a), math.sin(a)
    cx, cy = centre
    return [(cx + (x - cx) * c + (y - cy) * s, cy - (x - cx) * s + (y - cy) * c) for x, y in points]


def inner_box(box: Box) -> tuple[float, float, float, float]:
    """The box, shrunk about its centre so that any rotation of it stays inside `box` (its diagonal
    is the box's shorter side)."""
    x0, y0, x1, y1 = box
    w, h = x1 - x0, y1 - y0
    f = min(w, h) / math.hypot(w, h)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    return cx - w * f / 2, cy - h * f / 2, cx + w * f / 2, cy + h * f / 2


def random_colour(rng: np.random.Generator, avoid: np.ndarray, style: str = "plain") -> np.ndarray:
    """An object colour at least _MIN_CONTRAST from `avoid` (one colour, or one per row)."""
    if style == "striped":
        return _saturated_colour(rng, avoid)
    for _ in range(100):
        c = rng.integers(0, 256, size=3).astype(np.float32)
        if np.linalg.norm(c - avoid) >= _MIN_CONTRAST:
            return c
    # Fallback: the colour opposite the background, always far enough.
    return 255.0 - np.round(avoid)


# The look of a dataset: "plain" (the default) is a two-colour gradient with any object colour;
# "striped" (another visual domain, for fine-tuning benchmarks) is hard-edged stripes of two colours at
# a random angle and period, with saturated object colours far from both stripes.
STYLES = ("plain", "striped")
_STRIPE_PERIOD = (0.08, 0.25)  # fraction of the image side
_STRIPE_CONTRAST = 60.0  # min RGB distance between the two stripe colours


def background(rng: np.random.Generator, size: int, style: str = "plain") -> tuple[np.ndarray, np.ndarray]:
    """Float RGB background and the colours an object must stand out from: the gradient's mean colour
    (plain), or both stripe colours (striped)."""
    if style == "striped":
        return _striped(rng, size)
    c0 = rng.integers(0, 256, size=3).astype(np.float32)
    c1 = np.clip(c0 + rng.normal(0.0, _BG_GRADIENT, size=3), 0, 255).astype(np.float32)
    a = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    t = (np.cos(a) * xx + np.sin(a) * yy)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    return img, (c0 + c1) / 2


def _striped(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    c0 = rng.integers(0, 256, size=3).astype(np.float32)
    c1 = rng.integers(0, 256, size=3).astype(np.float32)
    if np.linalg.norm(c1 - c0) < _STRIPE_CONTRAST:
        c1 = 255.0 - c0
    a = rng.uniform(0, math.pi)
    period = rng.uniform(*_STRIPE_PERIOD) * size
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    t = (np.floor((np.cos(a) * xx + np.sin(a) * yy) / period) % 2)[..., None]
    return c0[None, None, :] * (1 - t) + c1[None, None, :] * t, np.stack([c0, c1])


def _saturated_colour(rng: np.random.Generator, avoid: np.ndarray) -> np.ndarray:
    """A fully saturated, bright colour (one of the hue circle's) far from every colour in `avoid`;
    the farthest of those tried when none is far enough."""
    best, best_d = None, -1.0
    for _ in range(100):
        h, v = rng.uniform(0, 6), rng.uniform(200, 255)
        x = v * (1 - abs(h % 2 - 1))
        c = np.array([(v, x, 0), (x, v, 0), (0, v, x), (0, x, v), (x, 0, v), (v, 0, x)][int(h) % 6], np.float32)
        d = float(np.min(np.linalg.norm(np.atleast_2d(avoid) - c, axis=1)))
        if d >= _MIN_CONTRAST:
            return c
        if d > best_d:
            best, best_d = c, d
    return best


def place(rng: np.random.Generator, size: int, boxes: list[Box], sizes: tuple[float, float] = (MIN_SIZE, MAX_SIZE)):
    """A random box (pixel edges x0, y0, x1, y1), each side a fraction `sizes` of the image side, not
    within _GAP of any box in `boxes`; None when none was found."""
    lo, hi = max(2, round(sizes[0] * size)), round(sizes[1] * size)
    for _ in range(_PLACE_TRIES):
        w = int(rng.integers(lo, hi + 1))
        aspect = rng.uniform(1 / _MAX_ASPECT, _MAX_ASPECT)
        h = int(np.clip(round(w * aspect), lo, hi))
        x0 = int(rng.integers(0, size - w + 1))
        y0 = int(rng.integers(0, size - h + 1))
        box = (x0, y0, x0 + w, y0 + h)
        if all(
            box[0] >= b[2] + _GAP or b[0] >= box[2] + _GAP or box[1] >= b[3] + _GAP or b[1] >= box[3] + _GAP
            for b in boxes
        ):
            return box
    return None


