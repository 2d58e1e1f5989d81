"""The README's first server calls on the demo model (Gemma 3 270M GGUF), as the README writes
them: `serve --model <gguf> --served-model-name gemma3`, then a greedy completion through the
official openai client."""

import openai
import pytest

from conftest import start_server, stop_server


@pytest.fixture(scope="module")
def gemma3_client(gemma3_gguf):
    proc, url = start_server(["--model", gemma3_gguf, "--served-model-name", "gemma3", "--kv-memory", "64MiB"])
    yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
    stop_server(proc)


def test_readme_completion_answers_and_repeats(gemma3_client):
    def run():
        return gemma3_client.completions.create(model="gemma3", prompt="The capital of France is", max_tokens=16,
                                                temperature=0)
    done = run()
    choice = done.choices[0]
    assert choice.text.strip()
    assert choice.finish_reason in ("length", "stop")
    assert 1 <= done.usage.completion_tokens <= 16
    assert run().choices[0].text == choice.text


def test_readme_model_is_listed(gemma3_client):
    assert [m.id for m in gemma3_client.models.list().data] == ["gemma3"]
