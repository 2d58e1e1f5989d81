"""Structured output through the official `openai` client on the random-weight qwen3 fixture:
`chat.completions.parse` with a pydantic model, `response_format` json_schema outputs that
validate against their schemas (nested objects, arrays, enums, anyOf, bounded numbers), vLLM's
`guided_*` and `structured_outputs` fields, streaming, and bad constraints refused with 400
naming the field while the server serves on."""

import json
import re
from typing import Literal, Optional

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

MESSAGES = [{"role": "user", "content": "describe a pet"}]

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "owner": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                                       "age": {"type": "integer", "minimum": 0, "maximum": 99}},
                      "required": ["name", "age"], "additionalProperties": False},
            "ok": {"type": "boolean"},
        },
        "required": ["owner", "ok"], "additionalProperties": False,
    },
    "array_of_enums": {
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                  "minItems": 1, "maxItems": 4}},
        "required": ["colors"], "additionalProperties": False,
    },
    "any_of": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5},
                                           {"type": "string", "enum": ["none", "many"]},
                                           {"type": "null"}]}},
        "required": ["value"], "additionalProperties": False,
    },
    "bounded_numbers": {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 10, "maximum": 20},
                       "x": {"type": "number", "minimum": -1.5, "maximum": 2.5},
                       "k": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4}},
        "required": ["n", "x", "k"], "additionalProperties": False,
    },
}


class Pet(BaseModel):
    kind: Literal["cat", "dog", "fish"]
    age: int = Field(ge=0, le=20)
    vaccinated: bool
    nickname: Optional[Literal["rex", "tom"]]


def schema_format(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_parse_returns_a_pydantic_object(client):
    for seed in range(3):
        done = client.chat.completions.parse(model="tiny", messages=MESSAGES, response_format=Pet,
                                             max_tokens=200, temperature=1.0, seed=seed)
        choice = done.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Pet), choice.message.content


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_outputs_validate(client, name):
    schema = SCHEMAS[name]
    for seed in range(4):
        done = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=200, seed=seed,
                                              temperature=1.0, response_format=schema_format(name, schema))
        choice = done.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_greedy_json_schema_on_completions_and_seeded_repeats(client):
    schema = SCHEMAS["nested"]
    greedy = client.completions.create(model="tiny", prompt="{", max_tokens=200, temperature=0,
                                       extra_body={"guided_json": schema})
    jsonschema.validate(json.loads(greedy.choices[0].text), schema)
    runs = [client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=200, seed=11,
                                           temperature=0.9, response_format=schema_format("n", schema))
            .choices[0].message.content for _ in range(2)]
    assert runs[0] == runs[1]


def test_streamed_json_schema_concatenates_to_valid_json(client):
    schema = SCHEMAS["array_of_enums"]
    chunks = list(client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=200, seed=5,
                                                 stream=True, response_format=schema_format("c", schema)))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), schema)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_guided_choice_regex_grammar_and_json_object(client):
    for seed in range(4):
        c = client.completions.create(model="tiny", prompt="answer:", max_tokens=20, seed=seed,
                                      extra_body={"guided_choice": ["yes", "no", "maybe"]})
        assert c.choices[0].text in ("yes", "no", "maybe")
        r = client.completions.create(model="tiny", prompt="code:", max_tokens=20, seed=seed,
                                      extra_body={"structured_outputs": {"regex": "[a-c]{3}-[0-9]{2}"}})
        assert re.fullmatch("[a-c]{3}-[0-9]{2}", r.choices[0].text), r.choices[0].text
        g = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=20, seed=seed,
                                           extra_body={"guided_grammar": 'start: ("ab" | "cd") "!"'})
        assert g.choices[0].message.content in ("ab!", "cd!")
    o = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=40, temperature=0,
                                       response_format={"type": "json_object"})
    assert o.choices[0].message.content.startswith("{")


def bad(client, field, **kwargs):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=5, **kwargs)
    assert e.value.body["param"] == field, e.value.body
    ok = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_bad_constraints_are_refused_naming_the_field(client):
    schema_field = "response_format.json_schema.schema"
    bad(client, "guided_regex", extra_body={"guided_regex": "(unclosed"})
    bad(client, schema_field, response_format=schema_format("x", {"type": "bogus"}))
    bad(client, "structured_outputs.grammar", extra_body={"structured_outputs": {"grammar": "start: nope"}})
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "x" * 60}
                                             for i in range(1200)}}
    bad(client, schema_field, response_format=schema_format("x", huge))
    deep = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    bad(client, schema_field, response_format=schema_format("x", deep))
    bad(client, "guided_choice", extra_body={"guided_regex": "a", "guided_choice": ["b"]})
    bad(client, "response_format.type", response_format={"type": "yaml"})
    bad(client, "guided_choice", extra_body={"guided_choice": []})
