"""Starts `tensorfold serve` on the qwen3 fixture (with a ChatML chat template) on a free
loopback port for the session, and stops it with SIGTERM at the end (it must exit 0)."""

import os
import pathlib
import shutil
import signal
import subprocess
import threading

import openai
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def binary() -> pathlib.Path:
    """The debug binary `cargo test --workspace` built (TENSORFOLD_BIN overrides)."""
    path = pathlib.Path(os.environ.get("TENSORFOLD_BIN", ROOT / "target" / "debug" / "tensorfold"))
    if not path.exists():
        pytest.fail(f"{path} does not exist: run `cargo build -p tensorfold` first")
    return path


@pytest.fixture(scope="session")
def base_url(tmp_path_factory):
    model = tmp_path_factory.mktemp("model")
    for f in (ROOT / "tests" / "fixtures" / "qwen3").iterdir():
        if not f.name.startswith("golden"):
            shutil.copy(f, model / f.name)
    (model / "chat_template.jinja").write_text(CHATML)
    args = [str(binary()), "serve", "--model", str(model), "--port", "0", "--threads", "1",
            "--kv-memory", "4MiB", "--served-model-name", "tiny"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    found = {}
    ready = threading.Event()

    def read():
        for line in proc.stdout:
            if line.startswith("listening on "):
                found["url"] = line.split()[-1]
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or "url" not in found:
        proc.kill()
        pytest.fail("the server printed no address")
    yield found["url"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.fixture()
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
