"""Chat with the demo model (Gemma 3 270M GGUF, which carries no chat template): `serve` falls
back to the built-in gemma template with a startup warning, and the official openai client gets
answers, streamed and not, with text, finish reason and usage; `<end_of_turn>` ends an answer."""

import json
import urllib.request

import openai
import pytest

from conftest import start_server, stop_server

# <bos> <start_of_turn> user \n ... <end_of_turn> \n <start_of_turn> model \n, as transformers'
# apply_chat_template tokenizes Gemma 3's template for one user message "Hi".
GEMMA_HI_IDS = [2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107]
END_OF_TURN = 106


@pytest.fixture(scope="module")
def served(gemma3_gguf):
    proc, url = start_server(["--model", gemma3_gguf, "--served-model-name", "gemma3", "--kv-memory", "64MiB"])
    yield url
    stop_server(proc)


@pytest.fixture()
def gemma(served):
    return openai.OpenAI(base_url=served + "/v1", api_key="unused", max_retries=0, timeout=120)


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def test_chat_renders_the_gemma_layout(served):
    doc = post(served, "/tokenize", {"model": "gemma3", "messages": [{"role": "user", "content": "Hi"}]})
    assert doc["tokens"] == GEMMA_HI_IDS
    with_system = post(served, "/tokenize", {"model": "gemma3", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})
    assert with_system["tokens"][:4] == GEMMA_HI_IDS[:4], "the system text opens the first user turn"
    assert with_system["tokens"][-6:] == GEMMA_HI_IDS[-6:]
    assert with_system["tokens"].count(105) == 2


def test_chat_completion_answers(gemma):
    done = gemma.chat.completions.create(
        model="gemma3", messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12, temperature=0)
    choice = done.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("length", "stop")
    assert done.usage.prompt_tokens == 16
    assert 1 <= done.usage.completion_tokens <= 12
    assert done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens


def test_streamed_chat_completion_answers(gemma):
    stream = gemma.chat.completions.create(
        model="gemma3", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0,
        stream=True, stream_options={"include_usage": True})
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert text.strip()
    assert finish in ("length", "stop")
    assert usage is not None and 1 <= usage.completion_tokens <= 8
    again = gemma.chat.completions.create(
        model="gemma3", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, temperature=0)
    assert again.choices[0].message.content == text, "streamed and whole answers agree"


def test_end_of_turn_ends_the_answer(gemma):
    done = gemma.chat.completions.create(
        model="gemma3", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, temperature=0,
        logit_bias={str(END_OF_TURN): 100})
    assert done.choices[0].finish_reason == "stop"
    assert done.choices[0].message.content == ""
    assert done.usage.completion_tokens == 1


WEATHER_TOOL = [{"type": "function", "function": {
    "name": "get_weather", "description": "the forecast for a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"],
                   "additionalProperties": False}}}]


def test_tools_through_the_builtin_template(served, gemma):
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = post(served, "/tokenize", {"model": "gemma3", "messages": question})
    listed = post(served, "/tokenize", {"model": "gemma3", "messages": question, "tools": WEATHER_TOOL})
    assert listed["count"] > plain["count"], "the built-in template puts the tools in the prompt"
    done = gemma.chat.completions.create(model="gemma3", messages=question, tools=WEATHER_TOOL,
                                         tool_choice="required", parallel_tool_calls=False, max_tokens=64, temperature=0)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Oslo")
    # The call and its result sent back render through the template and get an answer.
    history = question + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                          {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    back = gemma.chat.completions.create(model="gemma3", messages=history, tools=WEATHER_TOOL, max_tokens=8,
                                         temperature=0)
    assert back.choices[0].finish_reason in ("stop", "length", "tool_calls")
    answer = gemma.responses.create(model="gemma3", input="What is the weather in Paris?", max_output_tokens=64,
                                    tools=[{"type": "function", **WEATHER_TOOL[0]["function"]}],
                                    tool_choice="required", parallel_tool_calls=False, temperature=0)
    calls = [o for o in answer.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather", answer.output
