"""`tensorfold pull` and the official `huggingface_hub` client share one cache: each reads what the
other stored. A loopback stand-in for the hub serves the qwen3 fixture as a repo (its info, tree
listing, `resolve` downloads with the LFS weights redirected to a CDN path), so the model loads."""

import hashlib
import http.server
import json
import os
import subprocess
import threading

import huggingface_hub
import pytest

from conftest import ROOT, binary

REPO = "tf-test/qwen3-tiny"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PLAIN = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]
LFS = ["model.safetensors"]
TOKEN = "hf_interop_SeCrEt_24680"


def fixture_files():
    base = ROOT / "tests" / "fixtures" / "qwen3"
    return {name: (base / name).read_bytes() for name in PLAIN + LFS}


def git_oid(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Hub(http.server.BaseHTTPRequestHandler):
    """The hub's routes that `huggingface_hub` and `tensorfold pull` use."""

    files = fixture_files()
    cdn = ""  # the CDN's origin, another port: LFS downloads leave the hub's origin as on the real hub

    def log_message(self, *args):
        pass

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?")[0]
        api = f"/api/models/{REPO}/"
        if path.startswith(api + "revision/"):
            siblings = [{"rfilename": name} for name in self.files]
            return self.send(200, json.dumps({"id": REPO, "sha": COMMIT, "siblings": siblings}).encode())
        if path.startswith(api + "tree/"):
            entries = []
            for name, data in self.files.items():
                entry = {"type": "file", "path": name, "size": len(data), "oid": git_oid(data)}
                if name in LFS:
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries.append(entry)
            return self.send(200, json.dumps(entries).encode())
        if path.startswith("/cdn/"):
            data = next((d for d in self.files.values() if hashlib.sha256(d).hexdigest() == path[5:]), None)
            return self.send(200, data) if data is not None else self.send(404)
        prefix = f"/{REPO}/resolve/"
        if not path.startswith(prefix):
            return self.send(404)
        name = path[len(prefix):].split("/", 1)[1]
        data = self.files.get(name)
        if data is None:
            return self.send(404, headers=[("X-Repo-Commit", COMMIT)])
        if name in LFS:
            sha = hashlib.sha256(data).hexdigest()
            location = f"{Hub.cdn}/cdn/{sha}"
            return self.send(302, headers=[("X-Repo-Commit", COMMIT), ("Location", location),
                                           ("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data))),
                                           ("ETag", f'"{git_oid(data)}"')])
        return self.send(200, data, headers=[("X-Repo-Commit", COMMIT), ("ETag", f'"{git_oid(data)}"')])


@pytest.fixture(scope="module")
def hub():
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    Hub.cdn = f"http://127.0.0.1:{servers[1].server_port}"
    yield f"http://127.0.0.1:{servers[0].server_port}"
    for server in servers:
        server.shutdown()


def tensorfold(args, cache, endpoint, offline=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_CACHE=str(cache), HF_ENDPOINT=endpoint, HF_TOKEN=TOKEN, HF_HUB_OFFLINE="1" if offline else "0")
    return subprocess.run([str(binary()), *args], env=env, capture_output=True, text=True, timeout=120)


def test_huggingface_hub_reads_what_tensorfold_pulled(hub, tmp_path):
    cache = tmp_path / "hub"
    done = tensorfold(["pull", REPO], cache, hub)
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stderr + done.stdout
    folder = huggingface_hub.snapshot_download(REPO, local_files_only=True, cache_dir=cache)
    assert folder == done.stdout.strip()
    for name, data in Hub.files.items():
        assert (ROOT / folder / name).read_bytes() == data, name
        path = huggingface_hub.hf_hub_download(REPO, name, local_files_only=True, cache_dir=cache)
        assert open(path, "rb").read() == data, name
    for blob in (cache / "models--tf-test--qwen3-tiny" / "blobs").iterdir():
        assert TOKEN.encode() not in blob.read_bytes()


def test_tensorfold_reads_what_huggingface_hub_stored(hub, tmp_path):
    cache = tmp_path / "hub"
    folder = huggingface_hub.snapshot_download(REPO, cache_dir=cache, endpoint=hub)
    assert sorted(os.listdir(folder)) == sorted(Hub.files)
    # Offline, with the endpoint pointing at nothing: the cache alone must do.
    done = tensorfold(["check", "--model", REPO, "--device", "cpu"], cache, "http://127.0.0.1:9", offline=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok: Qwen3ForCausalLM"), done.stdout
    done = tensorfold(["generate", "--model", REPO, "--device", "cpu", "--ids", "1,2,3", "--max-tokens", "2",
                       "--json"], cache, "http://127.0.0.1:9", offline=True)
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["ids"]) == 2
