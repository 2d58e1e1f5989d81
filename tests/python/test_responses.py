"""`/v1/responses` through the official `openai` client on the random-weight qwen3 fixture: text
in and out (equal to chat's answer to the same conversation, greedy), the event stream the client
parses (its deltas add up to the final text), `text.format` with a JSON schema, a function tool
forced by `tool_choice`, and refusals naming the field (`previous_response_id`, unknown keys)."""

import json

import jsonschema
import openai
import pytest

WEATHER = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "description": "the forecast", "parameters": WEATHER},
         {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}]


def test_text_equals_chat_greedy(client):
    r = client.responses.create(model="tiny", instructions="be brief", input="hello there",
                                max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.usage.output_tokens <= 12 and r.usage.input_tokens > 0
    chat = client.chat.completions.create(
        model="tiny", max_tokens=12, temperature=0,
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    items = client.responses.create(model="tiny", max_output_tokens=12, temperature=0, input=[
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello there"}]}])
    assert items.output_text == r.output_text


def test_stream_events_add_up_to_the_response(client):
    kwargs = dict(model="tiny", input="count with me", max_output_tokens=16, temperature=0)
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(stream=True, **kwargs))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == whole.output_text
    assert events[-1].response.output_text == whole.output_text


def test_json_schema_format(client):
    for seed in range(3):
        r = client.responses.create(model="tiny", input="weather?", max_output_tokens=120, extra_body={"seed": seed}, temperature=1.0,
                                    text={"format": {"type": "json_schema", "name": "w", "schema": WEATHER,
                                                     "strict": True}})
        assert r.status == "completed", r
        jsonschema.validate(json.loads(r.output_text), WEATHER)


def test_required_tool_choice_gives_function_calls(client):
    for choice in ("required", {"type": "function", "name": "get_weather"}):
        r = client.responses.create(model="tiny", input="weather in Paris?", tools=TOOLS, tool_choice=choice,
                                    max_output_tokens=120, extra_body={"seed": 1}, temperature=1.0)
        calls = [o for o in r.output if o.type == "function_call"]
        assert calls, r.output
        for c in calls:
            assert c.call_id and c.name in ("get_weather", "get_time")
            if c.name == "get_weather":
                jsonschema.validate(json.loads(c.arguments), WEATHER)
        if isinstance(choice, dict):
            assert [c.name for c in calls] == ["get_weather"]
    streamed = list(client.responses.create(model="tiny", input="weather in Paris?", tools=TOOLS, stream=True,
                                            tool_choice={"type": "function", "name": "get_weather"},
                                            max_output_tokens=120, extra_body={"seed": 1}, temperature=1.0))
    args = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
    jsonschema.validate(json.loads(args), WEATHER)
    # A call and its output sent back render through the template and are answered.
    back = client.responses.create(model="tiny", tools=TOOLS, max_output_tokens=8, input=[
        {"role": "user", "content": "weather in Paris?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}])
    assert back.status in ("completed", "incomplete")


@pytest.mark.parametrize("extra,param", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"text": {"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "x": 1}}}, "text.format.x"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"tools": [{"type": "function", "name": 3}]}, "tools[0].name"),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": TOOLS}, "tool_choice.name"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content[0]"),
    ({"truncation": "auto"}, "truncation"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"store": True}, "store"),
    ({"stop": ["x"]}, "stop"),
])
def test_refusals_name_the_field(client, extra, param):
    body = {"model": "tiny", "input": "hi", **extra}
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/responses", body=body, cast_to=object)
    assert e.value.body["param"] == param, e.value.body
