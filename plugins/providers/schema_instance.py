"""A minimal JSON instance of a JSON Schema: what the echo model answers when a client asks
for structured output, so that offline programs (``with_structured_output``,
``generateObject``) get a document they can parse and validate.

"Minimal": only required properties, the fewest array items allowed, the smallest number
in range, the shortest string. Covered: ``type`` (one or a list), ``const``, ``enum``,
objects (``properties``, ``required``, ``minProperties`` from the optional ones), arrays
(``items``, ``prefixItems``, ``minItems``, ``uniqueItems`` for scalar items), strings
(``minLength``, ``maxLength``, the common ``format`` values), numbers and integers
(``minimum``, ``maximum``, exclusive bounds, ``multipleOf``), ``anyOf`` / ``oneOf`` (the
first branch), ``allOf`` (merged), ``$ref`` to ``#/$defs/...`` or ``#/definitions/...``
(or any local JSON pointer). A ``pattern`` cannot be met in general and is not tried: the
string is the shortest one allowed; nor is a ``format`` whose example is shorter than the
``minLength`` (or longer than the ``maxLength``) the schema also asks for. A schema the generator cannot follow (a ``$ref``
elsewhere, a recursion with no way out) raises :class:`SchemaError`.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SchemaError", "instance"]

#: Nesting a minimal instance never needs beyond this, short of a required recursion.
_MAX_DEPTH = 64

_FORMATS: dict[str, str] = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "duration": "P0D",
    "email": "a@example.com",
    "idn-email": "a@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "127.0.0.1",
    "ipv6": "::1",
    "uri": "https://example.com",
    "iri": "https://example.com",
    "uri-reference": "https://example.com",
    "iri-reference": "https://example.com",
    "url": "https://example.com",
    "uuid": "00000000-0000-0000-0000-000000000000",
}

class SchemaError(ValueError):
    """The schema cannot be followed to an instance."""


def instance(schema: Any) -> Any:
    """A minimal value valid against ``schema`` (a JSON Schema as parsed JSON)."""
    return _Generator(schema).value(schema, 0, 0)


class _Generator:
    def __init__(self, root: Any) -> None:
        self.root = root

    def value(self, schema: Any, depth: int, variant: int) -> Any:
        """The ``variant``-th distinct minimal value (0 is the smallest), for unique items."""
        if depth > _MAX_DEPTH:
            raise SchemaError(f"the schema nests deeper than {_MAX_DEPTH} levels (a required recursion?)")
        if schema is True or schema is None:
            return None if variant == 0 else variant
        if schema is False:
            raise SchemaError("the schema is false: no instance is valid")
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.value(_merge(target, rest) if rest else target, depth + 1, variant)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            choices = schema["enum"]
            if not isinstance(choices, list) or not choices:
                raise SchemaError("enum must be a non-empty list")
            return choices[min(variant, len(choices) - 1)]
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for branch in schema["allOf"]:
                merged = _merge(merged, self.resolve(branch["$ref"]) if isinstance(branch, dict) and "$ref" in branch else branch)
            return self.value(merged, depth + 1, variant)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                branches = schema[key]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(f"{key} must be a non-empty list")
                rest = {k: v for k, v in schema.items() if k != key}
                first = branches[0]
                return self.value(_merge(rest, first) if rest and isinstance(first, dict) else first, depth + 1, variant)
        kind = _kind(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "string":
            return _string(schema, variant)
        if kind in ("integer", "number"):
            return _number(schema, kind == "integer", variant)
        if kind == "boolean":
            return variant % 2 == 1
        if kind == "null":
            return None
        return None if variant == 0 else variant  # no constraint: anything is valid

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        required = list(schema.get("required") or [])
        wanted = max(0, int(schema.get("minProperties") or 0) - len(required))
        required += [name for name in properties if name not in required][:wanted]
        out: dict[str, Any] = {}
        for name in required:
            out[name] = self.value(properties.get(name, schema.get("additionalProperties", True)), depth + 1, 0)
        return out

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        count = max(int(schema.get("minItems") or 0), 0)
        unique = bool(schema.get("uniqueItems"))
        out: list[Any] = []
        for i in range(count):
            item_schema = prefix[i] if i < len(prefix) else items
            out.append(self.value(item_schema, depth + 1, i if unique else 0))
        if unique and len({repr(v) for v in out}) != len(out):
            raise SchemaError("uniqueItems with minItems this generator cannot meet for these items")
        return out

    def resolve(self, ref: Any) -> Any:
        """A local reference (``#/$defs/Name``, ``#/definitions/Name``, ``#``)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"only local references are followed, not {ref!r}")
        node = self.root
        for token in ref[1:].lstrip("/").split("/") if ref not in ("#", "#/") else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"the reference {ref!r} points nowhere in the schema")
        return node


def _kind(schema: dict[str, Any]) -> str | None:
    declared = schema.get("type")
    if isinstance(declared, str):
        return declared
    if isinstance(declared, list) and declared:
        names = [t for t in declared if isinstance(t, str)]
        # The first declared type, but a real value rather than null when one is allowed.
        return next((t for t in names if t != "null"), names[0] if names else None)
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    for key, kind in (("minLength", "string"), ("format", "string"), ("minimum", "number"), ("maximum", "number")):
        if key in schema:
            return kind
    return None


def _string(schema: dict[str, Any], variant: int) -> str:
    fmt = schema.get("format")
    base = _FORMATS.get(fmt, "") if isinstance(fmt, str) else ""
    length = int(schema.get("minLength") or 0)
    if base and len(base) >= length and ("maxLength" not in schema or len(base) <= int(schema["maxLength"])) and variant == 0:
        return base
    size = max(length, 1 if variant else 0)
    if variant:  # distinct strings of the smallest length that holds ``variant`` values
        letters = "abcdefghijklmnopqrstuvwxyz"
        text = ""
        n = variant - 1
        while True:
            text = letters[n % 26] + text
            n //= 26
            if n == 0:
                break
        return text.rjust(size, "a")
    return "a" * size


def _number(schema: dict[str, Any], integer: bool, variant: int) -> int | float:
    """The ``variant``-th number in range: 0 when allowed, else the roundest one near a bound."""
    lo, lo_open = _limit(schema, "minimum", "exclusiveMinimum")
    hi, hi_open = _limit(schema, "maximum", "exclusiveMaximum")
    step = schema.get("multipleOf")
    step = step if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0 else None

    def fits(value: float) -> bool:
        if integer and value != int(value):
            return False
        if step is not None and not math.isclose(value / step, round(value / step), abs_tol=1e-9):
            return False
        above = lo is None or (value > lo if lo_open else value >= lo)
        below = hi is None or (value < hi if hi_open else value <= hi)
        return above and below

    unit = step or 1
    found: list[float] = []
    for value in _candidates(lo, hi, unit, integer):
        if fits(value) and value not in found:
            found.append(value)
            if len(found) > variant:
                picked = found[variant]
                return int(picked) if integer or float(picked).is_integer() else picked
    raise SchemaError(f"no {'integer' if integer else 'number'} found that meets {schema!r}")


def _candidates(lo: float | None, hi: float | None, unit: float, integer: bool) -> list[float]:
    """Numbers to try, in order: 0 and its neighbours, then from each bound inwards in
    whole units and then in ever finer round steps, then the middle of the range."""
    out: list[float] = [k * unit for k in range(0, 64)] + [-k * unit for k in range(1, 64)]
    steps = [unit] if integer or unit != 1 else [10.0**-e for e in range(0, 10)]
    for bound, sign in ((lo, 1), (hi, -1)):
        if bound is None:
            continue
        for size in steps:
            near = (math.floor(bound / size) if sign > 0 else math.ceil(bound / size)) * size
            out.extend(round(near + sign * k * size, 12) for k in range(0, 64))
    if lo is not None and hi is not None and not integer and unit == 1:
        out.append((lo + hi) / 2)
    return out


def _limit(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    """One side's bound and whether it is exclusive (draft 4's boolean form too)."""
    value = schema.get(inclusive)
    flag = schema.get(exclusive)
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(flag, bool):
        return number, flag and number is not None
    if isinstance(flag, (int, float)):
        tighter = number is None or (flag >= number if inclusive == "minimum" else flag <= number)
        if tighter:
            return flag, True
    return number, False


def _merge(a: Any, b: Any) -> dict[str, Any]:
    """Two schemas that both apply, as one (``allOf``, ``$ref`` beside other keywords)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return a if isinstance(a, dict) else b if isinstance(b, dict) else {}
    out = dict(a)
    for key, value in b.items():
        if key == "properties" and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = list(dict.fromkeys([*out[key], *value]))
        else:
            out[key] = value
    return out
