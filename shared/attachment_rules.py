"""The rules an attachment must meet, as pure functions (DESIGN §9).

A file is judged by its bytes, never by the type the client claims: JPEG, PNG and PDF
attachments, and voice clips (WebM or Ogg Opus, MP3, M4A, WAV), at most 25 MB each,
under the sender's own ``{uid}/uploads/`` prefix. Files the
server derives sit beside the original (``…​.normalised.jpg``, ``…​.text.txt``) and can
never be referenced as uploads.

It depends on nothing of ours and sits outside ``shared/attachments`` (which builds the
documents' content, so imports ``shared/schemas``) because the API's schemas quote its
limits: in that package the two packages would import each other.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

MAX_ATTACHMENTS = 10
# 25 MB as people read it (MB = 1,000,000 bytes), which is what every message says.
MAX_BYTES = 25_000_000
MAX_PATH_CHARS = 1024
MAX_NAME_CHARS = 255
"""The longest file name a client may ask to upload (the server shortens it further)."""

AttachmentType = Literal["image/jpeg", "image/png", "application/pdf"]
AudioType = Literal["audio/webm", "audio/ogg", "audio/mpeg", "audio/mp4", "audio/wav"]
MediaType = AttachmentType | AudioType
ACCEPTED: tuple[AttachmentType, ...] = ("image/jpeg", "image/png", "application/pdf")
"""What a message may attach (``attachments``)."""
AUDIO: tuple[AudioType, ...] = ("audio/webm", "audio/ogg", "audio/mpeg", "audio/mp4", "audio/wav")
"""What a message may send as its ``voice`` clip."""
UPLOADABLE: tuple[MediaType, ...] = (*ACCEPTED, *AUDIO)
"""What an upload session may be started for."""
# Other names browsers and recorders give the same audio types.
AUDIO_ALIASES: dict[str, AudioType] = {
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/mp3": "audio/mpeg",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "audio/opus": "audio/ogg",
}

NORMALISED_SUFFIX = ".normalised.jpg"
TEXT_SUFFIX = ".text.txt"
DERIVED_SUFFIXES = (NORMALISED_SUFFIX, TEXT_SUFFIX)

SNIFF_BYTES = 12
_MAGIC: tuple[tuple[bytes, MediaType], ...] = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"%PDF-", "application/pdf"),
    (b"\x1a\x45\xdf\xa3", "audio/webm"),  # EBML: WebM (or Matroska; the decoder judges)
    (b"OggS", "audio/ogg"),
    (b"ID3", "audio/mpeg"),  # MP3 behind an ID3v2 tag
)


def sniff(head: bytes) -> MediaType | None:
    """The type the first bytes of a file say it is (``None``: none we accept).

    Only a first judgement for audio: the container is opened and decoded before a clip
    is used (``attachments/audio.py``), which refuses what merely starts like audio.
    """
    for magic, media_type in _MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[4:8] == b"ftyp":  # ISO base media: M4A, MP4
        return "audio/mp4"
    # A bare MPEG audio frame: 11 sync bits, then layer III (JPEG's 0xFFD8 is not one).
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE6 == 0xE2:
        return "audio/mpeg"
    return None


def audio_type(content_type: str) -> AudioType | None:
    """The audio type a client's ``Content-Type`` names (parameters such as
    ``;codecs=opus`` and other common names allowed), or ``None``."""
    bare = content_type.split(";", 1)[0].strip().lower()
    return next((t for t in AUDIO if t == bare), None) or AUDIO_ALIASES.get(bare)


def uploads_prefix(user_id: str) -> str:
    return f"{user_id}/uploads/"


def path_problem(user_id: str, path: str) -> str | None:
    """Why ``path`` may not be referenced by ``user_id`` (``None``: it may)."""
    if not path.startswith(uploads_prefix(user_id)):
        return f"it is not under your own uploads folder ({uploads_prefix(user_id)})"
    rest = path[len(uploads_prefix(user_id)) :]
    parts = rest.split("/")
    if not rest or any(p in ("", ".", "..") for p in parts) or "\\" in rest:
        return "it is not a plain file path inside your uploads folder"
    if any(ord(c) < 32 or ord(c) == 127 for c in rest):
        return "it contains control characters"
    if path.endswith(DERIVED_SUFFIXES):
        return "it names a file Spark AI Agent derives, not one you uploaded"
    return None


def file_name(path: str) -> str:
    """The last part of ``path``: what users call the file."""
    return path.rsplit("/", 1)[-1]


def size_text(size: int) -> str:
    """``size`` bytes as people read it: ``48.2 KB``, ``30 MB`` (a KB is 1,000 bytes and
    an MB 1,000,000, as file managers and phones count them)."""
    if size < 1000:
        return f"{size} byte{'' if size == 1 else 's'}"
    value, unit = (size / 1000, "KB") if size < 1_000_000 else (size / 1_000_000, "MB")
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"


def display_name(name: str) -> str | None:
    """The name a user gave a file, kept to show it (the storage path has a safe form of
    it): NFC, on one line (control characters and line breaks become spaces), trimmed,
    at most ``MAX_NAME_CHARS``; ``None`` when nothing is left."""
    text = unicodedata.normalize("NFC", name)
    kept = "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)
    return " ".join(kept.split())[:MAX_NAME_CHARS] or None
