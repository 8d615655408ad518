"""Images normalised to JPEG with Pillow (the only module that imports it).

Every accepted image (PNG or JPEG) is decoded and written again: the orientation its
EXIF asks for is applied, then nothing of the original's metadata survives (EXIF with
GPS, XMP, ICC profiles, comments): the new JPEG is made from pixels alone. Its long
side is at most ``MAX_SIDE``. An image declaring more than ``MAX_PIXELS`` pixels is
refused before it is decoded (a decompression bomb).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from PIL import Image

MAX_PIXELS = 40_000_000
MAX_SIDE = 2048
QUALITY = 85


class TooManyPixels(Exception):
    """The image declares more pixels than ``MAX_PIXELS``."""


class NotAnImage(Exception):
    """The bytes could not be decoded as a JPEG or PNG image."""


@dataclass(frozen=True, slots=True)
class Normalised:
    data: bytes
    width: int
    height: int


def normalise(data: bytes) -> Normalised:
    """``data`` (a JPEG or PNG) as a clean JPEG: upright, RGB, no metadata.

    Raises:
        TooManyPixels: a decompression bomb (or simply too big an image).
        NotAnImage: the bytes are not a decodable JPEG or PNG.
    """
    # Imported on the first image, not at start-up: a large part of an instance's cold
    # start (`python -X importtime`, bench/cold_start.py) that a request without an
    # image does not need.
    from PIL import Image, ImageOps, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data), formats=["JPEG", "PNG"]) as image:
                if image.width * image.height > MAX_PIXELS:
                    raise TooManyPixels
                image.load()
                upright = ImageOps.exif_transpose(image)
                rgb = _rgb(upright)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise TooManyPixels from None
        except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
            raise NotAnImage(str(exc)) from None
    rgb.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    # A new image from the pixels alone: no info dict, so no EXIF, ICC or XMP to carry.
    clean = Image.new("RGB", rgb.size)
    clean.paste(rgb)
    out = io.BytesIO()
    clean.save(out, "JPEG", quality=QUALITY, optimize=True)
    return Normalised(out.getvalue(), clean.width, clean.height)


def _rgb(image: Image.Image) -> Image.Image:
    """RGB, with any transparency laid on white (as a page would show it)."""
    from PIL import Image

    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba, mask=rgba.getchannel("A"))
        return white
    return image.convert("RGB")
