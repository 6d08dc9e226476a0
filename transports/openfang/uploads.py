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

from kernel import admit_part
from kernel import model as m
from kernel.errors import http_status
from transports.shared import HttpError

from .codec import Upload


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
    """The kernel's one attachment policy (kernel/attachments.py), applied as the file is
    uploaded, so a PDF is refused at once with the message every dialect gives for it."""
    declared: m.ContentPart = (
        m.ImagePart(data=upload.data, mime_type=upload.content_type)
        if upload.content_type.startswith("image/")
        else m.FilePart(name=upload.filename, data=upload.data, content_type=upload.content_type)
    )
    try:
        part = admit_part(declared)
    except m.KernelError as exc:
        raise HttpError(http_status(exc.code), exc.message, code=exc.code) from None
    if isinstance(part, m.ImagePart):
        return Upload(filename=upload.filename, content_type=part.mime_type, data=part.data)
    generic = upload.content_type in ("", "application/octet-stream")  # text, as the kernel found
    data = part.data if isinstance(part, m.FilePart) else upload.data
    return Upload(filename=upload.filename, content_type="text/plain" if generic else upload.content_type, data=data)
