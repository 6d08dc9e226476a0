"""The one attachment policy: what files and images a prompt may carry, judged once, here.

Every dialect hands the kernel what its client sent (a PDF, a PNG, a UTF-8 file, however its
wire spells them); the kernel decides, where prompts and saved history enter it
(:func:`admit_parts`), with one rule and one error:

* **Text files** — a file whose bytes are UTF-8 (a byte-order mark is dropped) without NUL
  characters is text, whatever type it was declared with: it reaches the model as text under
  its name (:func:`file_text`). The declared type is kept for the model to read.
* **Images** — PNG, JPEG, GIF and WebP stay image parts (providers send them as images). A
  file whose bytes are one of these is an image part too, so a picture attached as a file is
  seen as a picture in every dialect.
* **Anything else** (a PDF, an archive, audio...) is refused with one ``invalid_request`` naming
  the file and its type: no provider of the gateway can give it to a model as it is, and
  decoding it anyway would hand the model mojibake.
* **Sizes** — a file over ``MAX_FILE_BYTES`` or an image over ``MAX_IMAGE_BYTES`` is
  ``too_large``; a prompt of more than ``MAX_PARTS`` attachments likewise.

Pure (the model only), so codecs may use :func:`message_from_parts` and :func:`sniff_image`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from .model import ContentPart, FilePart, ImagePart, KernelError, Message, TextPart

#: The image types every provider takes (OpenAI-compatible vision models).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_FILE_BYTES = 1_048_576
MAX_IMAGE_BYTES = 3_145_728
MAX_PARTS = 16

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_BOM = b"\xef\xbb\xbf"


def sniff_image(data: bytes) -> str | None:
    """The image type the bytes begin with (PNG, JPEG, GIF, WebP), else None."""
    for magic, mime in _IMAGE_MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _text(data: bytes) -> str | None:
    try:
        text = data.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def admit_part(part: ContentPart) -> ContentPart:
    """The part as the kernel keeps it, or the one error for what no provider can take."""
    if isinstance(part, TextPart):
        return part
    if isinstance(part, ImagePart):
        mime = part.mime_type.split(";", 1)[0].strip().lower()
        if mime not in IMAGE_TYPES:
            raise KernelError("invalid_request", f"unsupported image type {part.mime_type!r}: send PNG, JPEG, GIF or WebP")
        if not part.data:
            raise KernelError("invalid_request", "the image is empty")
        if len(part.data) > MAX_IMAGE_BYTES:
            raise KernelError("too_large", f"an image of {len(part.data)} bytes is over the {MAX_IMAGE_BYTES}-byte limit")
        return part if mime == part.mime_type else ImagePart(data=part.data, mime_type=mime)
    image = sniff_image(part.data)
    if image is not None:
        return admit_part(ImagePart(data=part.data, mime_type=image))
    if len(part.data) > MAX_FILE_BYTES:
        raise KernelError("too_large", f"file {part.name!r} of {len(part.data)} bytes is over the {MAX_FILE_BYTES}-byte limit")
    text = _text(part.data)
    if text is None:
        raise KernelError(
            "invalid_request",
            f"file {part.name!r} ({part.content_type or 'no type'}) is not text the model can read: only UTF-8 text "
            "files and images (PNG, JPEG, GIF, WebP) can be sent; convert it to text first",
        )
    if part.data.startswith(_BOM):
        return FilePart(name=part.name, data=text.encode("utf-8"), content_type=part.content_type)
    return part


def admit_parts(parts: Iterable[ContentPart]) -> tuple[ContentPart, ...]:
    """Every part admitted (:func:`admit_part`), at most ``MAX_PARTS`` attachments."""
    admitted = tuple(admit_part(part) for part in parts)
    attached = sum(1 for part in admitted if not isinstance(part, TextPart))
    if attached > MAX_PARTS:
        raise KernelError("too_large", f"{attached} attachments are more than the {MAX_PARTS} a prompt may carry")
    return admitted


def admit_message(message: Message) -> Message:
    """A message of saved history with its parts admitted like a prompt's."""
    if not message.parts:
        return message
    parts = admit_parts(message.parts)
    return message if parts == message.parts else msgspec.structs.replace(message, parts=parts)


def message_from_parts(parts: tuple[ContentPart, ...], role: Literal["user", "assistant"] = "user") -> Message:
    """A message of these parts: plain ``content`` when all of them are text (joined by
    newlines), else the parts themselves. The one place this is decided, for the kernel's
    prompts and for the dialects that rebuild history from their clients' messages."""
    texts = [part.text for part in parts if isinstance(part, TextPart)]
    if len(texts) == len(parts):
        return Message(role=role, content="\n".join(texts))
    return Message(role=role, content="", parts=parts)


def file_text(part: FilePart) -> str:
    """A file as the model reads it: its name and type, then its text. A file stored before
    this policy that is not text is named, never decoded into mojibake."""
    text = _text(part.data)
    if text is None:
        return f"File: {part.name} ({part.content_type}): {len(part.data)} bytes that are not text, left out"
    return f"File: {part.name} ({part.content_type})\n```\n{text}\n```"
