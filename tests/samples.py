"""Real files made in the tests: images with and without EXIF, PDFs, a pixel bomb."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import ExifTags, Image
from pypdf import PdfReader, PdfWriter

GPS = {
    ExifTags.GPS.GPSLatitudeRef: "N",
    ExifTags.GPS.GPSLatitude: (51.0, 30.0, 26.0),
    ExifTags.GPS.GPSLongitudeRef: "W",
    ExifTags.GPS.GPSLongitude: (0.0, 7.0, 39.0),
}


def png_with_gps(width: int = 120, height: int = 80) -> bytes:
    """A PNG whose EXIF holds a GPS position, a camera model and orientation 6
    (shown rotated 90° clockwise, so upright it is ``height`` wide)."""
    image = Image.new("RGBA", (width, height), (200, 30, 30, 255))
    exif = image.getexif()
    exif[ExifTags.Base.Model] = "Family Phone"
    exif[ExifTags.Base.Orientation] = 6
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(GPS)
    out = io.BytesIO()
    image.save(out, "PNG", exif=exif)
    return out.getvalue()


def jpeg_with_gps(width: int = 64, height: int = 48) -> bytes:
    image = Image.new("RGB", (width, height), (20, 120, 220))
    exif = image.getexif()
    exif.get_ifd(ExifTags.IFD.GPSInfo).update(GPS)
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif, quality=90)
    return out.getvalue()


def has_gps(data: bytes) -> bool:
    with Image.open(io.BytesIO(data)) as image:
        return bool(image.getexif().get_ifd(ExifTags.IFD.GPSInfo))


def pdf_with_pages(*texts: str) -> bytes:
    """A PDF with one page per text, each written in Helvetica (hand-built, valid xref)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"",  # the page tree, filled in below
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in texts:
        content = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % len(objects)
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>".encode()
    return pdf_of(objects)


def pdf_of(objects: list[bytes]) -> bytes:
    """A PDF file of ``objects`` (numbered from 1, the first its catalogue), with their
    cross-reference table and trailer."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_with_pages("Secret"))))
    writer.encrypt("a-password", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def pixel_bomb_png(side: int = 100_000) -> bytes:
    """A tiny PNG whose header declares ``side`` × ``side`` pixels (10 gigapixels)."""
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + _chunk(b"IEND", b"")
    )
