"""What a server operator switches on, through the official `openai` client: `models.retrieve`
(and its 404), and `--api-key` (the client's `api_key` must match; `/health` stays open)."""

import shutil
import urllib.error
import urllib.request

import openai
import pytest

from conftest import CHATML, ROOT, start_server, stop_server


def test_models_retrieve_returns_the_served_model(client):
    model = client.models.retrieve("tiny")
    assert (model.id, model.object) == ("tiny", "model")
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("other")
    assert e.value.code == "model_not_found"


@pytest.fixture(scope="module")
def keyed_url(tmp_path_factory):
    model = tmp_path_factory.mktemp("keyed-model")
    for f in (ROOT / "tests" / "fixtures" / "qwen3").iterdir():
        if not f.name.startswith("golden"):
            shutil.copy(f, model / f.name)
    (model / "chat_template.jinja").write_text(CHATML)
    proc, url = start_server(["--model", model, "--threads", "1", "--kv-memory", "4MiB", "--device", "cpu",
                              "--served-model-name", "tiny", "--api-key", "sk-right"], timeout=60)
    yield url
    stop_server(proc)


def keyed_client(url, key):
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_api_key_is_required_and_checked(keyed_url):
    with pytest.raises(openai.AuthenticationError) as e:
        keyed_client(keyed_url, "sk-wrong").models.list()
    assert e.value.status_code == 401
    assert e.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        keyed_client(keyed_url, "sk-wrong").completions.create(model="tiny", prompt="a", max_tokens=1)
    good = keyed_client(keyed_url, "sk-right")
    assert [m.id for m in good.models.list().data] == ["tiny"]
    assert good.models.retrieve("tiny").id == "tiny"
    out = good.completions.create(model="tiny", prompt="a", max_tokens=2, temperature=0)
    assert out.usage.completion_tokens >= 1


def test_health_needs_no_key(keyed_url):
    with urllib.request.urlopen(keyed_url + "/health", timeout=30) as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(keyed_url + "/metrics", timeout=30)
    assert e.value.code == 401
