"""The schema-instance generator: every instance it gives validates (checked by the
``jsonschema`` package, an independent implementation), and it is minimal where that is
what a client relies on (required properties only, minItems items)."""

from __future__ import annotations

from typing import Any, Literal

import jsonschema
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.providers.schema_instance import SchemaError, instance

CASES: list[dict[str, Any]] = [
    {"type": "string"},
    {"type": "string", "minLength": 3, "maxLength": 5},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "uuid"},
    {"type": "integer", "minimum": 5},
    {"type": "integer", "exclusiveMinimum": 5},
    {"type": "integer", "maximum": -3},
    {"type": "integer", "minimum": 7, "multipleOf": 5},
    {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.75},
    {"type": "number", "minimum": -2.5, "maximum": -1.5},
    {"type": "boolean"},
    {"type": "null"},
    {"type": ["null", "string"]},
    {"enum": ["red", "green"]},
    {"const": {"fixed": [1, 2]}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 3, "uniqueItems": True},
    {"type": "array", "items": {"type": "string"}, "minItems": 30, "uniqueItems": True},
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "uniqueItems": True},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer", "minimum": 1}], "minItems": 2},
    {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "boolean"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "string"}}, "minProperties": 1},
    {
        "type": "object",
        "properties": {
            "outer": {
                "type": "object",
                "properties": {"inner": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}, "minItems": 1}},
                "required": ["inner"],
            }
        },
        "required": ["outer"],
    },
    {"anyOf": [{"type": "integer", "minimum": 3}, {"type": "string"}]},
    {"oneOf": [{"type": "string", "minLength": 2}, {"type": "integer"}]},
    {"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"const": 1}}, "required": ["b"]}]},
    {
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"]}},
        "type": "object",
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/Point"}, "minItems": 2}},
        "required": ["points"],
    },
    {
        "definitions": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/definitions/Node"}, "v": {"type": "integer"}}, "required": ["v"]}},
        "$ref": "#/definitions/Node",
    },
    True,
    {},
]


@pytest.mark.parametrize("schema", CASES, ids=[str(i) for i in range(len(CASES))])
def test_every_instance_validates(schema: Any) -> None:
    value = instance(schema)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_an_object_holds_only_its_required_properties() -> None:
    assert instance(CASES[20]) == {"a": "", "b": 0}


def test_arrays_have_min_items_distinct_when_unique() -> None:
    assert instance(CASES[16]) == [0, 1, 2]
    assert len(set(instance(CASES[17]))) == 30


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(min_length=5, max_length=5)


class Person(pydantic.BaseModel):
    """Pydantic's own schemas ($defs, anyOf with null, enums as Literal) — what LangChain sends."""

    name: str
    age: int = pydantic.Field(ge=18, le=130)
    role: Literal["admin", "user"]
    nickname: str | None
    addresses: list[Address] = pydantic.Field(min_length=1)
    scores: dict[str, float]


def test_pydantic_schema_instance_parses_back() -> None:
    schema = Person.model_json_schema()
    value = instance(schema)
    jsonschema.validate(value, schema)
    person = Person.model_validate(value)
    assert person.age == 18 and person.role == "admin" and len(person.addresses) == 1


@pytest.mark.parametrize(
    "schema",
    [
        False,
        {"$ref": "https://example.com/other.json"},
        {"$ref": "#/$defs/Missing"},
        {"type": "integer", "minimum": 0.2, "maximum": 0.8},
        {"type": "array", "items": {"const": 1}, "minItems": 2, "uniqueItems": True},
        {"$defs": {"L": {"type": "object", "properties": {"next": {"$ref": "#/$defs/L"}}, "required": ["next"]}}, "$ref": "#/$defs/L"},
        {"enum": []},
    ],
)
def test_a_schema_without_a_reachable_instance_is_an_error(schema: Any) -> None:
    with pytest.raises(SchemaError):
        instance(schema)


# ---------------------------------------------------------------- property: random satisfiable schemas


def _bounded(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """A number schema whose bounds leave room for a value (an integer one at least one)."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": kind}
        low = draw(st.none() | st.integers(-1000, 1000))
        if low is not None:
            schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = low
        if draw(st.booleans()):
            room = draw(st.integers(2, 1000))
            start = low if low is not None else draw(st.integers(-1000, 1000))
            schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = start + room
        if kind == "integer" and draw(st.booleans()) and "maximum" not in schema and "exclusiveMaximum" not in schema:
            schema["multipleOf"] = draw(st.integers(1, 7))
        return schema

    return build()


_strings = st.builds(
    lambda low, extra: {"type": "string", "minLength": low, **({"maxLength": low + extra} if extra is not None else {})},
    st.integers(0, 40), st.none() | st.integers(0, 5),
) | st.sampled_from(["date-time", "date", "email", "uuid", "uri", "ipv4", "hostname"]).map(lambda fmt: {"type": "string", "format": fmt})
_scalars = (
    _strings | _bounded("integer") | _bounded("number") | st.just({"type": "boolean"}) | st.just({"type": "null"})
    | st.lists(st.integers() | st.text(max_size=5), min_size=1, max_size=4).map(lambda values: {"enum": values})
    | st.integers().map(lambda value: {"const": value})
)


def _compound(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=6), children, max_size=4).flatmap(
        lambda props: st.builds(
            lambda required: {"type": "object", "properties": props, "required": required, "additionalProperties": False},
            st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
        )
    )
    arrays = st.builds(lambda items, low: {"type": "array", "items": items, "minItems": low}, children, st.integers(0, 4))
    unions = st.lists(children, min_size=1, max_size=3).flatmap(lambda branches: st.sampled_from([{"anyOf": branches}, {"oneOf": branches[:1]}]))
    nullable = children.map(lambda schema: {**schema, "type": [schema["type"], "null"]} if schema.get("type") not in (None, "null") and isinstance(schema["type"], str) else schema)
    return objects | arrays | unions | nullable


_schemas = st.recursive(_scalars, _compound, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(schema=_schemas, wrap=st.booleans())
def test_fuzz_random_satisfiable_schemas_get_valid_instances(schema: dict[str, Any], wrap: bool) -> None:
    """Any schema built from satisfiable parts gets an instance, valid by jsonschema; behind a
    ``$ref`` to ``$defs`` too."""
    if wrap:
        schema = {"$defs": {"Inner": schema}, "type": "object", "properties": {"inner": {"$ref": "#/$defs/Inner"}}, "required": ["inner"]}
    jsonschema.validate(instance(schema), schema, format_checker=jsonschema.FormatChecker())
