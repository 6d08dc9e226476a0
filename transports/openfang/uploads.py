"""Parsing ``POST /api/agents/{id}/upload`` bodies (server side: pure parsing, but its
refusals are the router's ``HttpError`` 400s).

The dashboard sends ``multipart/form-data`` with a ``file`` part and a ``filename``
field; older clients sent the raw bytes with ``Content-Type`` and ``X-Filename``
headers.  Both are accepted.  Only images and UTF-8 text are useful to a model, so
anything else is refused here with a clear 400 rather than sent as garbage later.
"""

from __future__ import annotations

import email.parser
import email.policy
import mimetypes
from collections.abc import Mapping

from transports.shared import HttpError

from .codec import Upload

_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def parse_upload(body: bytes, headers: Mapping[str, str]) -> Upload:
    """The uploaded file, or HttpError 400 naming the problem."""
    content_type = headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        filename, part_type, data = _from_multipart(body, content_type)
    else:
        filename = headers.get("x-filename", "") or "upload"
        part_type = content_type.split(";")[0].strip()
        data = body
    if not data:
        raise HttpError(400, "Empty upload", code="invalid_request")
    filename = filename.replace("\\", "/").rsplit("/", 1)[-1] or "upload"
    if not part_type or part_type == "application/octet-stream":
        part_type = mimetypes.guess_type(filename)[0] or part_type or "application/octet-stream"
    return _checked(Upload(filename=filename, content_type=part_type, data=data))


def _from_multipart(body: bytes, content_type: str) -> tuple[str, str, bytes]:
    parser = email.parser.BytesParser(policy=email.policy.HTTP)
    message = parser.parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not message.is_multipart():
        raise HttpError(400, "Malformed multipart body", code="invalid_request")
    file_part = None
    field_name = ""
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name == "filename" and part.get_filename() is None:
            field_name = (part.get_content() if part.get_content_maintype() == "text" else "").strip()
        elif part.get_filename() is not None or name == "file":
            file_part = file_part or part
    if file_part is None:
        raise HttpError(400, "Missing 'file' part in multipart upload", code="invalid_request")
    payload = file_part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    filename = field_name or file_part.get_filename() or "upload"
    return filename, file_part.get_content_type(), data


def _checked(upload: Upload) -> Upload:
    if upload.content_type.startswith("image/"):
        if upload.content_type not in _IMAGE_TYPES:
            raise HttpError(400, f"Unsupported image type {upload.content_type} (use PNG, JPEG, GIF or WebP)", code="invalid_request")
        return upload
    try:
        upload.data.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(
            400, f"Unsupported attachment {upload.filename!r}: only images and UTF-8 text files can be sent to the model",
            code="invalid_request",
        ) from None
    if upload.content_type in ("", "application/octet-stream"):
        upload = Upload(filename=upload.filename, content_type="text/plain", data=upload.data)
    return upload
