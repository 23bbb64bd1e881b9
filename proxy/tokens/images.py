"""Tokens (images): what an image part costs, by OpenAI's published rules, without fetching it.

Rules (OpenAI "Images and vision" guide, section "Calculating costs"):

- Tile models (gpt-4o, gpt-4.1, gpt-4.5, gpt-4-turbo, o1, o3, gpt-5...): `detail: low` costs
  the model's base tokens; `high` scales the image to fit a 2048x2048 square, then (only
  down, never up) so its shortest side is 768 px, and costs base + tile x (512 px tiles).
  Base/tile: 85/170 for gpt-4o and most; 2833/5667 for gpt-4o-mini; 75/150 for o1 and o3;
  70/140 for gpt-5. Published checks: 1024x1024 high = 765, 2048x4096 high = 1105, low = 85.
- Patch models (gpt-4.1-mini/nano, gpt-5-mini/nano, o4-mini): 32 px patches, at most 1536
  (the image is shrunk to fit), times a per-model multiplier, rounded up, plus 1 (what the
  API reports: community.openai.com thread 1262691); `detail` does not matter.
- `detail: auto` (or missing) is counted as `high`: the conservative reading.
- The size comes from the image's own header when the URL is a `data:` URL (PNG, GIF,
  WEBP, JPEG; only the first bytes are decoded). An `http(s)` URL is never fetched, and an
  unreadable header counts as the largest high-detail image (768x2048: 8 tiles, or 1536
  patches), so the budget is never under-counted.
"""

from __future__ import annotations

import binascii
import math
import struct
from dataclasses import dataclass

# The size that gives the most tiles after OpenAI's resize: shortest side 768, longest 2048.
UNKNOWN_SIZE = (2048, 768)
_MAX_PATCHES = 1536
# JPEG keeps its size in the SOF segment, after EXIF/ICC segments that can be tens of KB.
_JPEG_HEAD_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class TileRule:
    base: int
    tile: int


@dataclass(frozen=True, slots=True)
class PatchRule:
    multiplier: float


ImageRule = TileRule | PatchRule

DEFAULT_RULE = TileRule(85, 170)
# First match on the model name (lowercase, provider prefix removed) wins.
_RULES: tuple[tuple[str, ImageRule], ...] = (
    ("gpt-4o-mini", TileRule(2833, 5667)),
    ("gpt-4.1-mini", PatchRule(1.62)),
    ("gpt-4.1-nano", PatchRule(2.46)),
    ("gpt-5-mini", PatchRule(1.62)),
    ("gpt-5-nano", PatchRule(2.46)),
    ("o4-mini", PatchRule(1.72)),
    ("o1", TileRule(75, 150)),
    ("o3", TileRule(75, 150)),
    ("gpt-5", TileRule(70, 140)),
)


def image_rule(model: str) -> ImageRule:
    """The image cost rule for a (normalized) model name; gpt-4o's rule when unknown."""
    for prefix, rule in _RULES:
        if model.startswith(prefix):
            return rule
    return DEFAULT_RULE


def image_tokens(image_url: object, rule: ImageRule) -> int:
    """Tokens for an `image_url` content part's value (a dict with `url`/`detail`, or a URL)."""
    if isinstance(image_url, dict):
        url, detail = image_url.get("url"), image_url.get("detail")
    else:
        url, detail = image_url, None
    size = image_size(url) if isinstance(url, str) else None
    width, height = size or UNKNOWN_SIZE
    if isinstance(rule, PatchRule):
        # The API bills one more than the guide's patches x multiplier (gpt-4.1-mini, nano,
        # o4-mini: a 128x64 image costs 14, 21, 15); rounded up, never under.
        return math.ceil(patches(width, height) * rule.multiplier - 1e-9) + 1
    if detail == "low":
        return rule.base
    return rule.base + rule.tile * tiles(width, height)


def tiles(width: int, height: int) -> int:
    """512 px tiles of a high-detail image after OpenAI's two resizing steps."""
    if max(width, height) > 2048:
        scale = 2048 / max(width, height)
        width, height = int(width * scale), int(height * scale)
    if min(width, height) > 768:
        scale = 768 / min(width, height)
        width, height = int(width * scale), int(height * scale)
    return max(1, math.ceil(width / 512)) * max(1, math.ceil(height / 512))


def patches(width: int, height: int) -> int:
    """32 px patches, shrunk to at most 1536 the way OpenAI's guide shows."""
    count = math.ceil(width / 32) * math.ceil(height / 32)
    if count <= _MAX_PATCHES:
        return max(1, count)
    shrink = math.sqrt(_MAX_PATCHES * 32 * 32 / (width * height))
    w, h = width * shrink / 32, height * shrink / 32
    # Then shrink a little more so one side is a whole number of patches.
    shrink *= min(max(1, math.floor(w)) / w, max(1, math.floor(h)) / h)
    w_px, h_px = int(width * shrink), int(height * shrink)
    return min(_MAX_PATCHES, max(1, math.ceil(w_px / 32)) * max(1, math.ceil(h_px / 32)))


def image_size(url: str) -> tuple[int, int] | None:
    """(width, height) from a base64 `data:` URL's image header; None when not readable."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 0, 256)
    if comma < 0 or not url[:comma].endswith(";base64"):
        return None
    head = _decode_head(url, comma + 1, 32)
    if head.startswith(b"\xff\xd8"):
        head = _decode_head(url, comma + 1, _JPEG_HEAD_BYTES)
    try:
        return _header_size(head)
    except (struct.error, IndexError):
        return None


def _decode_head(url: str, start: int, nbytes: int) -> bytes:
    chars = (nbytes + 2) // 3 * 4
    chunk = url[start : start + chars]
    chunk = chunk[: len(chunk) // 4 * 4]
    try:
        return binascii.a2b_base64(chunk)
    except (binascii.Error, ValueError):
        return b""


def _header_size(data: bytes) -> tuple[int, int] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", data[6:10])
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        width, height = _webp_size(data)
    elif data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    else:
        return None
    return (width, height) if width > 0 and height > 0 else None


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        return (width, int.from_bytes(data[27:30], "little") + 1)
    if chunk == b"VP8L":
        bits = int.from_bytes(data[21:25], "little")
        return ((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8 ":
        width, height = struct.unpack("<HH", data[26:30])
        return (width & 0x3FFF, height & 0x3FFF)
    return (0, 0)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            pos += 2
            continue
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        # SOF0..SOF15 carry the size, except DHT (C4), JPG (C8) and DAC (CC).
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return (width, height) if width > 0 and height > 0 else None
        pos += 2 + length
    return None
