"""The schema-instance generator: every instance it gives validates (checked by the
``jsonschema`` package, an independent implementation), and it is minimal where that is
what a client relies on (required properties only, minItems items)."""

from __future__ import annotations

from typing import Any, Literal

import jsonschema
import pydantic
import pytest

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
