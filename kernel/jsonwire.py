"""JSON decoding for every wire: msgspec decoders that never let nesting crash a process.

msgspec (like the standard library) raises ``RecursionError`` on input nested deeper
than the interpreter's recursion limit — ``[[[[…]]]]`` 200,000 levels deep is a valid
JSON text of 400 kB. Every place that decodes what a client sent uses this module, so
such input is one more malformed message (``msgspec.DecodeError``), answered in the
dialect's own shape, and never an exception that ends a connection or the process.

Pure: the standard library and msgspec only, so a dialect's ``wire.py`` and ``codec.py``
may import it, and so may a provider reading its upstream (``kernel`` exports it lazily:
``from kernel import JsonDecoder`` loads nothing else).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

import msgspec

__all__ = ["TOO_DEEP", "JsonDecoder", "decode_json"]

T = TypeVar("T")

TOO_DEEP = "JSON nested too deeply"


class JsonDecoder(Generic[T]):
    """``msgspec.json.Decoder(type)`` whose ``decode`` turns too-deep nesting into a DecodeError."""

    __slots__ = ("_decode",)

    def __init__(self, type: type[T] | Any = Any, *, strict: bool = True) -> None:
        self._decode = msgspec.json.Decoder(type, strict=strict).decode

    def decode(self, data: bytes | bytearray | memoryview | str) -> T:
        try:
            value: T = self._decode(data)
            return value
        except RecursionError:
            raise msgspec.DecodeError(TOO_DEEP) from None


_any = JsonDecoder[Any]()


@overload
def decode_json(data: bytes | bytearray | memoryview | str) -> Any: ...
@overload
def decode_json(data: bytes | bytearray | memoryview | str, type: type[T]) -> T: ...
def decode_json(data: bytes | bytearray | memoryview | str, type: Any = None) -> Any:
    """Decode ``data`` (into ``type`` when given) like ``msgspec.json.decode``, guarded."""
    if type is None:
        return _any.decode(data)
    try:
        return msgspec.json.decode(data, type=type)
    except RecursionError:
        raise msgspec.DecodeError(TOO_DEEP) from None
