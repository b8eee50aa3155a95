"""serve_util.py - shared by the `omni serve` client tests: start the server on a free port (port 0, the bound port
is read from its "listening on" line), stop it, run `omni generate` for reference answers, raw HTTP requests,
/metrics parsing, and pass/fail counting that ends with the "N passed, N failed" line CTest logs show.
Every wait has a timeout: a test never hangs."""
import base64
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

OMNI = sys.argv[1]
FIXTURES = sys.argv[2]
KEY = "test-key-123"

_passed = 0
_failed = 0


def check(cond, what):
    global _passed, _failed
    if cond:
        _passed += 1
    else:
        _failed += 1
        print("FAIL:", what, file=sys.stderr, flush=True)
    return cond


def finish():
    print(f"{_passed} passed, {_failed} failed", flush=True)
    sys.exit(1 if _failed else 0)


class Server:
    """`omni serve -m MODEL --port 0 ...` with its stderr in a temp file."""

    def __init__(self, model, *args, key=KEY):
        self.log = tempfile.NamedTemporaryFile(prefix="omni-serve-", suffix=".log", delete=False)
        cmd = [OMNI, "serve", "-m", model, "--port", "0", "--temp", "0"] + list(args)
        if key:
            cmd += ["--api-key", key]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log, stdin=subprocess.DEVNULL)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + self.text())
        self.base = f"http://127.0.0.1:{self.port}/v1"

    def text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        """SIGTERM, then the exit code (0 expected); SIGKILL after 20 s. Idempotent."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code = self.proc.returncode
        if os.path.exists(self.log.name):  # a second stop() only returns the code
            os.unlink(self.log.name)
        return code

    def request(self, method, path, body=None, key=KEY, headers=None, timeout=60):
        """Raw HTTP: (status, body bytes). body: bytes, str or a JSON-able object."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metrics(self):
        status, data = self.request("GET", "/metrics")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def pages_used(self):
        return sum(v for k, v in self.metrics().items() if k.startswith("omni_kv_pages_used"))


def generate(model, prompt, n, *args):
    """The CLI's greedy answer (stdout without the final newline)."""
    r = subprocess.run([OMNI, "generate", "-m", model, "-p", prompt, "--temp", "0", "-n", str(n), "--no-perf"]
                       + list(args), capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"omni generate failed ({r.returncode}): {r.stderr.decode(errors='replace')}")
    out = r.stdout.decode()
    return out[:-1] if out.endswith("\n") else out


def data_url(path, mime):
    with open(path, "rb") as f:
        return f"data:{mime};base64," + base64.b64encode(f.read()).decode()


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def model_with_tokenizer(src):
    """A copy of a fixture model dir next to the small tokenizer (the vision fixtures carry none)."""
    dst = tempfile.mkdtemp(prefix="omni-serve-model-")
    d = os.path.join(dst, os.path.basename(src))
    shutil.copytree(src, d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIXTURES, "tok-small", f), d)
    return d
