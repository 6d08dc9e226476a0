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

import re
from typing import Any, Generic, TypeVar, overload

import msgspec

__all__ = ["MAX_WIRE_INT", "TOO_DEEP", "JsonDecoder", "decode_json", "parse_wire_int"]

T = TypeVar("T")

TOO_DEEP = "JSON nested too deeply"

#: msgspec reports a high surrogate escape (``"\\ud800"``) with no low one after it as
#: "Input data was truncated", which sends a client looking for a cut-off body.
_TRUNCATED = "Input data was truncated"
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")


def _decode_error(exc: msgspec.DecodeError, data: bytes | bytearray | memoryview | str) -> msgspec.DecodeError:
    """``exc``, or a clearer one where msgspec's message misleads."""
    if str(exc) == _TRUNCATED:
        raw = data.encode() if isinstance(data, str) else bytes(data)
        found = _LONE_SURROGATE.search(raw)
        if found is not None:
            escape = found.group().decode()
            return msgspec.DecodeError(f"JSON is malformed: the escape {escape} (byte {found.start()}) is a lone UTF-16 surrogate; a string holds Unicode characters only")
    return exc


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
        except msgspec.DecodeError as exc:
            raise _decode_error(exc, data) from None


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
    except msgspec.ValidationError:
        raise
    except msgspec.DecodeError as exc:
        raise _decode_error(exc, data) from None


#: The largest integer a client may send in a query parameter or header (seq, limit, offset):
#: JSON's safe integer range, far below SQLite's 64-bit limit.
MAX_WIRE_INT = 2**53 - 1


def parse_wire_int(text: str, *, minimum: int = 0, maximum: int = MAX_WIRE_INT) -> int | None:
    """A decimal integer from a query parameter or header within [minimum, maximum], or None.

    ASCII digits only (``"²".isdigit()`` is true, ``int("²")`` fails), and no more digits than
    ``maximum`` has, so a 5,000-digit value costs nothing and never reaches the store.
    """
    text = text.strip()
    if not text or not text.isascii() or not text.isdigit() or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if minimum <= value <= maximum else None
