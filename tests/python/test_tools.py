"""Tool calling through the official `openai` client on the random-weight qwen3 fixture:
`tool_choice` `required` and a named function are enforced by a grammar, so the calls come back
as `tool_calls` whose arguments validate against the tool's parameters, streamed and not (the
streamed `arguments` concatenate to valid JSON); `auto` and `none` answer in text; a bad choice
is a 400 naming the field."""

import json

import jsonschema
import openai
import pytest

MESSAGES = [{"role": "user", "content": "what is the weather in Paris?"}]
WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "the forecast", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"],
        "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check_calls(calls, names):
    assert calls, "at least one call"
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), PARAMS[c.function.name])


def test_required_and_named_choices_return_valid_tool_calls(client):
    for seed in range(4):
        done = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                              max_tokens=200, seed=seed, temperature=1.0)
        choice = done.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        check_calls(choice.message.tool_calls, PARAMS)
        named = client.chat.completions.create(
            model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=200, seed=seed, temperature=1.0,
            tool_choice={"type": "function", "function": {"name": "get_weather"}})
        calls = named.choices[0].message.tool_calls
        assert len(calls) == 1
        check_calls(calls, ["get_weather"])


def test_streamed_tool_calls_round_trip(client):
    kwargs = dict(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=200, seed=3)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    args, names, finish = {}, {}, None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
                if d.function.name:
                    names[d.index] = d.function.name
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [names[i] for i in sorted(names)] == [c.function.name for c in whole]
    assert [json.loads(args[i]) for i in sorted(args)] == [json.loads(c.function.arguments) for c in whole]


def test_auto_and_none_answer_in_text_when_no_call_is_made(client):
    for choice in ("auto", "none"):
        done = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                              max_tokens=8, temperature=0)
        assert done.choices[0].message.tool_calls is None
        assert isinstance(done.choices[0].message.content, str)


@pytest.mark.parametrize("choice,field", [
    ({"type": "function", "function": {"name": "nope"}}, "tool_choice.function.name"),
    ("sometimes", "tool_choice"),
])
def test_bad_tool_choices_are_refused(client, choice, field):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=4)
    assert e.value.body["param"] == field
