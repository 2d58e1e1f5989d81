"""Starts `tensorfold serve` for the tests: `start_server(args)` runs the debug binary on a free
loopback port and returns it with its address; the `base_url` / `client` fixtures serve the qwen3
fixture (with a ChatML chat template) for the session, and `gemma3_gguf` is the demo model's path
(scripts/test.sh fetches it; elsewhere a test using it skips when it is absent). Every server is
stopped with SIGTERM at the end and must exit 0."""

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
GEMMA3_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"


def binary() -> pathlib.Path:
    """The debug binary `cargo test --workspace` built (TENSORFOLD_BIN overrides)."""
    path = pathlib.Path(os.environ.get("TENSORFOLD_BIN", ROOT / "target" / "debug" / "tensorfold"))
    if not path.exists():
        pytest.fail(f"{path} does not exist: run `cargo build -p tensorfold` first")
    return path


def start_server(args, timeout=120):
    """Runs `tensorfold serve ARGS --port 0`; returns (process, "http://127.0.0.1:PORT") once it
    prints its address, or fails the test with what it printed."""
    proc = subprocess.Popen([str(binary()), "serve", *map(str, args), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found, err = {}, []
    ready = threading.Event()

    def read_stdout():
        for line in proc.stdout:
            if line.startswith("listening on ") and "url" not in found:
                found["url"] = line.split()[2]
                ready.set()
        ready.set()

    def read_stderr():
        for line in proc.stderr:
            err.append(line)
            del err[:-50]

    threading.Thread(target=read_stdout, daemon=True).start()
    threading.Thread(target=read_stderr, daemon=True).start()
    if not ready.wait(timeout) or "url" not in found:
        proc.kill()
        proc.wait()
        pytest.fail("the server printed no address; its stderr ended with:\n" + "".join(err))
    return proc, found["url"]


def stop_server(proc):
    """SIGTERM, then the server must exit 0 within 30 s."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.fixture(scope="session")
def base_url(tmp_path_factory):
    model = tmp_path_factory.mktemp("model")
    for f in (ROOT / "tests" / "fixtures" / "qwen3").iterdir():
        if not f.name.startswith("golden"):
            shutil.copy(f, model / f.name)
    (model / "chat_template.jinja").write_text(CHATML)
    proc, url = start_server(["--model", model, "--threads", "1", "--kv-memory", "4MiB",
                              "--served-model-name", "tiny"], timeout=60)
    yield url
    stop_server(proc)


@pytest.fixture()
def client(base_url):
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def gemma3_gguf() -> pathlib.Path:
    """The demo model: TF_GEMMA3_GGUF, else the cache scripts/fetch_gemma3_gguf.sh fills. Absent,
    a test using it skips, except under CI, where scripts/test.sh must have fetched it."""
    named = os.environ.get("TF_GEMMA3_GGUF")
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache"))
    path = pathlib.Path(named) if named else cache / "tensorfold" / "models" / GEMMA3_GGUF_NAME
    if not path.is_file():
        message = f"{path} is absent: scripts/fetch_gemma3_gguf.sh fetches it"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
