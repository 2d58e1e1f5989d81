"""The official `openai` client against `tensorfold serve`: completions and chat, streaming and
not, n > 1, logprobs, seeds, and errors mapped to the client's exception types."""

import openai
import pytest

GREEDY = {"temperature": 0, "max_tokens": 8}
NO_EOS = {"extra_body": {"ignore_eos": True}}


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]


def test_completion_plain_and_streamed_agree(client):
    done = client.completions.create(model="tiny", prompt="hello world", **GREEDY, **NO_EOS)
    choice = done.choices[0]
    assert done.object == "text_completion"
    assert choice.finish_reason == "length"
    assert done.usage.completion_tokens == 8
    assert done.usage.total_tokens == done.usage.prompt_tokens + 8
    chunks = list(client.completions.create(model="tiny", prompt="hello world", stream=True,
                                            stream_options={"include_usage": True}, **GREEDY, **NO_EOS))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == choice.text
    assert chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_completion_token_ids_batch_n_and_logprobs(client):
    done = client.completions.create(model="tiny", prompt=[[10, 20, 30], [40, 50]], n=2, logprobs=2,
                                     max_tokens=5, seed=3, **NO_EOS)
    assert len(done.choices) == 4
    assert sorted(c.index for c in done.choices) == [0, 1, 2, 3]
    for c in done.choices:
        lp = c.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
        assert all(x <= 0 for x in lp.token_logprobs)
        assert all(1 <= len(top) <= 2 for top in lp.top_logprobs)
    assert done.usage.prompt_tokens == 5
    assert done.usage.completion_tokens == 20


def test_seeded_sampling_repeats_and_seeds_differ(client):
    def run(seed):
        return client.completions.create(model="tiny", prompt="abc", max_tokens=12, temperature=1.0,
                                          seed=seed, **NO_EOS).choices[0].text
    assert run(5) == run(5)
    assert len({run(s) for s in range(5)}) > 1


def test_chat_plain_and_streamed_agree(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    done = client.chat.completions.create(model="tiny", messages=messages, **GREEDY, **NO_EOS)
    msg = done.choices[0].message
    assert done.object == "chat.completion"
    assert msg.role == "assistant"
    assert isinstance(msg.content, str)
    assert done.usage.completion_tokens == 8
    stream = client.chat.completions.create(model="tiny", messages=messages, stream=True, **GREEDY, **NO_EOS)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_n_and_logprobs(client):
    done = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], n=3,
                                          logprobs=True, top_logprobs=3, max_completion_tokens=4, seed=11, **NO_EOS)
    assert len(done.choices) == 3
    for c in done.choices:
        content = c.logprobs.content
        assert len(content) == 4
        for entry in content:
            assert entry.logprob <= 0
            assert len(entry.top_logprobs) == 3
            assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob


def test_chat_stream_with_n_reports_every_choice(client):
    stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], n=2,
                                            max_tokens=3, stream=True, stream_options={"include_usage": True},
                                            **NO_EOS)
    finished = {}
    usage = None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            if c.finish_reason:
                finished[c.index] = c.finish_reason
    assert finished == {0: "length", 1: "length"}
    assert usage.completion_tokens == 6


def test_bad_values_raise_bad_request_naming_the_field(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt="a", temperature=500)
    assert e.value.status_code == 400
    assert e.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="tiny", prompt=[1, 512])
    assert e.value.body["param"] == "prompt[1]"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "a"}],
                                       logit_bias={"9999": 1})
    assert e.value.body["param"] == "logit_bias"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="someone-else", prompt="a")
    assert client.completions.create(model="tiny", prompt="a", max_tokens=1).choices
