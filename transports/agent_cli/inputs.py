"""Decoding a ``RemoteRequest``: JSON in, a validated request or a precise error out.

A pure piece of the codec (kept apart for its size): no I/O and no exceptions
escaping: :func:`parse_request` returns a :class:`ParsedRequest` or a
:class:`BadRequest` whose message says what was wrong and where
(``$.input.Image.data``), so a client author can fix the request. Every decode goes
through :mod:`kernel.jsonwire`, so nesting too deep is one more parse error.
"""

from __future__ import annotations

import binascii
from typing import Any

import msgspec

from kernel import JsonDecoder, sniff_image
from kernel import model as m

from . import wire

_envelope = JsonDecoder[wire.Envelope](wire.Envelope)
_probe = JsonDecoder[wire.IdProbe](wire.IdProbe)
_tagged = JsonDecoder[str | dict[str, msgspec.Raw]](str | dict[str, msgspec.Raw])
_null = JsonDecoder[None](None)
_decoders = {name: JsonDecoder[Any](kind) for name, kind in wire.VALUE_VARIANTS.items()}
_encode = msgspec.json.Encoder().encode

class Limits(msgspec.Struct, frozen=True, kw_only=True):
    max_file_bytes: int = 1_048_576
    max_image_bytes: int = 3_145_728
    max_parts: int = 16
    max_depth: int = 4


class ParsedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A readable request: which variant, its decoded value, and the request options."""

    request_id: str
    variant: str
    value: Any
    stream: bool
    options: m.PromptOptions


class BadRequest(msgspec.Struct, frozen=True, kw_only=True):
    """An unusable request. ``kind`` is ``parse_error`` (malformed) or ``processing_error``
    (well-formed, but its content cannot be used, e.g. a binary file)."""

    request_id: str | None
    kind: str
    message: str


class _Invalid(Exception):
    def __init__(self, message: str, kind: str = "parse_error") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind


def parse_request(data: str | bytes, limits: Limits) -> ParsedRequest | BadRequest:
    """Decode one frame. Never raises."""
    try:
        envelope = _envelope.decode(data)
    except msgspec.MsgspecError as exc:
        return BadRequest(request_id=probe_request_id(data), kind="parse_error", message=str(exc))
    try:
        variant, value = _variant(envelope.input, "$.input")
        if variant in ("Multi", "Text", "Image", "File"):
            value = content_parts(variant, value, limits, "$.input")
    except _Invalid as exc:
        return BadRequest(request_id=envelope.request_id, kind=exc.kind, message=exc.message)
    return ParsedRequest(
        request_id=envelope.request_id,
        variant=variant,
        value=value,
        stream=bool(envelope.stream),
        options=prompt_options(envelope.config, envelope.use_tools),
    )


def probe_request_id(data: str | bytes) -> str | None:
    """The request's ``request_id`` if it is readable at all (for error replies)."""
    try:
        rid = _probe.decode(data).request_id
    except msgspec.MsgspecError:
        return None
    return rid if isinstance(rid, str) else None


def prompt_options(config: wire.RequestConfig | None, use_tools: bool | None) -> m.PromptOptions:
    """``config`` overrides -> kernel options; ``0`` and null mean "the session default"."""
    if config is None:
        return m.PromptOptions(use_tools=use_tools is not False)
    return m.PromptOptions(
        max_tokens=config.max_tokens or None,
        system_prompt=config.prompt,
        use_tools=use_tools is not False,
        max_context_messages=config.max_context_num or None,
        ask_before_tool_execution=config.ask_before_tool_execution,
        max_tool_iterations=config.max_tool_try or None,
    )


def _at(exc: msgspec.MsgspecError, path: str) -> str:
    """Re-root msgspec's ``$`` paths at where the value sits in the request."""
    text = str(exc)
    return text.replace("`$", f"`{path}") if "`$" in text else f"{text} - at `{path}`"


def _variant(raw: msgspec.Raw | bytes, path: str) -> tuple[str, Any]:
    """Pick an externally tagged variant: ``"Unit"``, ``{"Unit": null}`` or ``{"Name": value}``."""
    try:
        tagged = _tagged.decode(raw)
    except msgspec.ValidationError as exc:
        raise _Invalid(f"{_at(exc, path)}: expected a variant name or an object with one variant key") from None
    except msgspec.MsgspecError as exc:
        raise _Invalid(f"{exc} - at `{path}`") from None
    if isinstance(tagged, str):
        if tagged in wire.UNIT_VARIANTS:
            return tagged, None
        if tagged in wire.VALUE_VARIANTS:
            raise _Invalid(f"variant `{tagged}` needs a value, e.g. {{\"{tagged}\": ...}} - at `{path}`")
        raise _Invalid(_unknown(tagged, path))
    if len(tagged) != 1:
        found = ", ".join(f"`{k}`" for k in list(tagged)[:5]) or "none"
        raise _Invalid(f"expected exactly one variant key, found {len(tagged)} ({found}) - at `{path}`")
    ((name, value),) = tagged.items()
    where = f"{path}.{name}"
    if name in wire.UNIT_VARIANTS:
        try:
            _null.decode(value)
        except msgspec.MsgspecError:
            raise _Invalid(f"unit variant `{name}` takes null or no value, e.g. \"{name}\" - at `{where}`") from None
        return name, None
    decoder = _decoders.get(name)
    if decoder is None:
        raise _Invalid(_unknown(name, path))
    try:
        return name, decoder.decode(value)
    except msgspec.MsgspecError as exc:
        raise _Invalid(_at(exc, where)) from None


def _unknown(name: str, path: str) -> str:
    shown = name if len(name) <= 64 else name[:61] + "..."
    expected = ", ".join(f"`{v}`" for v in wire.ALL_VARIANTS)
    return f"unknown variant `{shown}`, expected one of {expected} - at `{path}`"


# ---------------------------------------------------------------- content inputs


def content_parts(variant: str, value: Any, limits: Limits, path: str, depth: int = 0) -> tuple[m.ContentPart, ...]:
    """Text / Image / File / Multi -> kernel content parts (Multi flattened, bounded)."""
    where = f"{path}.{variant}"
    if variant == "Text":
        return (m.TextPart(value),)
    if variant == "Image":
        return (image_part(value, limits, where),)
    if variant == "File":
        return (file_part(value, limits, where),)
    if depth >= limits.max_depth:
        raise _Invalid(f"`Multi` is nested more than {limits.max_depth} levels deep - at `{where}`")
    if not value:
        raise _Invalid(f"`Multi` needs at least one input - at `{where}`")
    parts: list[m.ContentPart] = []
    for index, raw in enumerate(value):
        item_path = f"{where}[{index}]"
        name, item = _variant(raw, item_path)
        if name not in wire.CONTENT_VARIANTS:
            raise _Invalid(f"`{name}` cannot be part of `Multi` (only Text, Image, File, Multi) - at `{item_path}`")
        parts.extend(content_parts(name, item, limits, item_path, depth + 1))
        if len(parts) > limits.max_parts:
            raise _Invalid(f"`Multi` holds more than {limits.max_parts} inputs", "processing_error")
    return tuple(parts)


def _base64(data: str, where: str) -> bytes:
    # Line breaks (MIME style) and the URL-safe alphabet are accepted; anything else is an error.
    cleaned = "".join(data.split()).replace("-", "+").replace("_", "/")
    try:
        return binascii.a2b_base64(cleaned.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise _Invalid(f"invalid base64 ({exc}) - at `{where}.data`") from None


def _max_encoded(limit: int) -> int:
    return (limit + 2) // 3 * 4


def image_part(image: wire.ImageInput, limits: Limits, where: str) -> m.ImagePart:
    if len(image.data) > _max_encoded(limits.max_image_bytes) + 8:
        raise _Invalid(f"image is over the {limits.max_image_bytes}-byte limit", "processing_error")
    data = _base64(image.data, where)
    if not data:
        raise _Invalid(f"image data is empty - at `{where}.data`", "processing_error")
    if len(data) > limits.max_image_bytes:
        raise _Invalid(f"image of {len(data)} bytes is over the {limits.max_image_bytes}-byte limit", "processing_error")
    mime = (image.mime_type or "").strip().lower() or sniff_image(data)
    if mime is None:
        raise _Invalid("cannot tell the image format; set `mime_type` (image/png, image/jpeg, ...)", "processing_error")
    if not mime.startswith("image/"):
        raise _Invalid(f"`mime_type` {mime!r} is not an image type - at `{where}.mime_type`", "processing_error")
    return m.ImagePart(data=data, mime_type=mime)


def file_part(file: wire.FileInput, limits: Limits, where: str) -> m.FilePart:
    name = file.filename.strip()[:255] or "unnamed"
    if len(file.data) > _max_encoded(limits.max_file_bytes) + 8:
        raise _Invalid(f"file {name!r} is over the {limits.max_file_bytes}-byte limit", "processing_error")
    data = _base64(file.data, where)
    if len(data) > limits.max_file_bytes:
        raise _Invalid(f"file {name!r} of {len(data)} bytes is over the {limits.max_file_bytes}-byte limit", "processing_error")
    # Whether the model can read it is the kernel's one attachment policy (kernel/attachments.py).
    return m.FilePart(name=name, data=data, content_type=file.content_type.strip() or "application/octet-stream")


def instruction_args(parameters: Any) -> str:
    """``Instruction.parameters`` -> the slash command's argument string.

    A string is used as is; a list is joined with spaces; an object uses its
    ``args`` string if it has one, else its values joined with spaces.
    """
    if parameters is None:
        return ""
    if isinstance(parameters, str):
        return parameters
    if isinstance(parameters, dict):
        if isinstance(parameters.get("args"), str):
            return parameters["args"]
        parameters = list(parameters.values())
    if isinstance(parameters, list):
        return " ".join(_scalar(v) for v in parameters if v is not None)
    return _scalar(parameters)


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else _encode(value).decode("utf-8")
