"""test_serve_openai.py - `omni serve` driven by the official `openai` Python client (and raw HTTP for what the
client cannot send), on the fixture models, no GPU:
  - chat (non-streamed and streamed), a system message and /v1/completions give exactly `omni generate`'s greedy
    text; usage counts; /v1/models;
  - an image request (vision fixture), an audio request and an audio+image request (Qwen3-Omni fixtures) equal
    their CLI counterparts; a local image path only with --allow-files; images over the context are refused before
    they are encoded; a stop sequence ends the engine's work at once; SIGTERM answers the requests in flight;
  - 16 concurrent streaming clients all get their exact answers; a client that disconnects mid-stream has its
    job cancelled and its KV pages back in /metrics; with one sequence running and the queue full, the next
    request gets 503;
  - bad requests (invalid JSON, wrong types, unknown model, body over the limit, corrupt base64 image, an image
    that is not one, media over the limits, missing or wrong API key) get the right status and the OpenAI error
    JSON, and the server keeps serving right answers; SIGTERM stops it with exit code 0.
Usage: python test_serve_openai.py OMNI_BIN FIXTURES_DIR"""
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

import openai

from serve_util import (FIXTURES, KEY, OMNI, Server, b64, check, data_url, finish, generate, model_with_tokenizer)

TEXT = os.path.join(FIXTURES, "text", "qvl-h64-hd128-gqa2-tied")
N = 16
LONG = 30000  # max_tokens of the request that is abandoned (seconds of work: it cannot end before the disconnect)
PROMPTS = ["Hello! Who are you?", "Write a haiku about the sea.", "1, 2, 3, 4,", "Qu'est-ce que c'est ?"]


def client(s, key=KEY):
    return openai.OpenAI(base_url=s.base, api_key=key, timeout=60, max_retries=0)


def user(text):
    return [{"role": "user", "content": text}]


def chat(cl, messages, n=N, **kw):
    r = cl.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=n, **kw)
    return r


def stream_text(cl, messages, n=N, **kw):
    """Concatenated deltas, the finish reason and the usage chunk (if any)."""
    text, fin, usage = "", None, None
    for ch in cl.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=n, stream=True,
                                         **kw):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            text += c.delta.content or ""
            fin = c.finish_reason or fin
    return text, fin, usage


def error_shape(status, body, want_status, what):
    ok = check(status == want_status, f"{what}: status {status}, want {want_status}: {body[:300]!r}")
    try:
        e = json.loads(body)["error"]
        ok &= check(isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
                    and "param" in e and "code" in e, f"{what}: error JSON shape: {body[:300]!r}")
    except (ValueError, KeyError, TypeError):
        ok &= check(False, f"{what}: not an OpenAI error JSON: {body[:300]!r}")
    return ok


def still_serving(s, cl, ref, what):
    status, _ = s.request("GET", "/health")
    check(status == 200 and s.alive(), f"health after {what}")
    check(chat(cl, user(PROMPTS[0])).choices[0].message.content == ref, f"right answer after {what}")


METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                         r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*\})? (-?[0-9.]+(?:e[+-]?[0-9]+)?|NaN|[+-]Inf)$')


def check_metrics_format(s):
    """/metrics is valid Prometheus text (0.0.4): one HELP and one TYPE per family before its samples, sample
    lines name{label="v",...} value, counters end in _total, no family split, a final newline."""
    status, data = s.request("GET", "/metrics")
    text = data.decode()
    bad, typed, seen, last = [], {}, set(), None
    for line in text.split("\n")[:-1]:
        m = re.match(r"^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$", line)
        if m:
            if m.group(1) == "TYPE":
                if m.group(2) in typed or m.group(3) not in ("counter", "gauge", "histogram", "summary", "untyped"):
                    bad.append(line)
                typed[m.group(2)] = m.group(3)
            continue
        m = METRIC_LINE.match(line)
        if not m or m.group(1) not in typed or (m.group(1) != last and m.group(1) in seen):
            bad.append(line)
            continue
        if typed[m.group(1)] == "counter" and not m.group(1).endswith("_total"):
            bad.append(line)
        seen.add(m.group(1))
        last = m.group(1)
    check(status == 200 and text.endswith("\n") and not bad and len(seen) >= 8, f"/metrics format: {bad} in\n{text}")


def test_text(s, refs):
    cl = client(s)
    check_metrics_format(s)
    models = cl.models.list()
    check([m.id for m in models.data] == [MODEL], f"models: {[m.id for m in models.data]}")
    for p in PROMPTS:
        r = chat(cl, user(p))
        c = r.choices[0]
        check(c.message.content == refs[p], f"chat {p!r}: {c.message.content!r} != {refs[p]!r}")
        check(c.finish_reason in ("length", "stop") and 0 < r.usage.completion_tokens <= N
              and r.usage.prompt_tokens > 0
              and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
              f"usage {r.usage} finish {c.finish_reason}")
        text, fin, usage = stream_text(cl, user(p), stream_options={"include_usage": True})
        check(text == refs[p], f"stream {p!r}: {text!r} != {refs[p]!r}")
        check(fin == c.finish_reason and usage is not None and usage.completion_tokens == r.usage.completion_tokens
              and usage.prompt_tokens == r.usage.prompt_tokens, f"stream finish {fin} usage {usage}")
    sys_ref = generate(TEXT, PROMPTS[1], N, "--system", "You are a pirate.")
    r = chat(cl, [{"role": "system", "content": "You are a pirate."}] + user(PROMPTS[1]))
    check(r.choices[0].message.content == sys_ref, f"system: {r.choices[0].message.content!r} != {sys_ref!r}")
    raw_ref = generate(TEXT, "The capital of France is", N, "--raw")
    r = cl.completions.create(model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=N)
    check(r.choices[0].text == raw_ref, f"completions: {r.choices[0].text!r} != {raw_ref!r}")
    text = "".join(c.choices[0].text for c in cl.completions.create(
        model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=N, stream=True) if c.choices)
    check(text == raw_ref, f"completions stream: {text!r} != {raw_ref!r}")
    # a stop sequence cuts the answer before it, and the engine stops generating at once (max_tokens LONG: seconds
    # of work it must not do for an answer already sent)
    ref = refs[PROMPTS[0]]
    if len(ref) > 4:
        stop = ref[3:5]
        r = chat(cl, user(PROMPTS[0]), n=LONG, stop=[stop])
        want = ref[:ref.index(stop)]
        check(r.choices[0].message.content == want and r.choices[0].finish_reason == "stop",
              f"stop {stop!r}: {r.choices[0].message.content!r} != {want!r}")
        t0 = time.time()
        while time.time() - t0 < 15 and (s.metrics()["omni_requests_running"] != 0 or s.pages_used() != 0):
            time.sleep(0.02)
        m = s.metrics()
        check(m["omni_requests_running"] == 0 and s.pages_used() == 0,
              f"after a stop sequence: {m['omni_requests_running']} running, {s.pages_used()} pages in use")


def test_concurrent(s, refs):
    results = [None] * 16

    def run(i):
        try:
            results[i] = stream_text(client(s), user(PROMPTS[i % 4]))[0]
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            results[i] = f"exception: {e}"

    th = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    ok = sum(results[i] == refs[PROMPTS[i % 4]] for i in range(16))
    check(ok == 16, f"{ok} of 16 concurrent streams exact: {results}")
    print(f"16 concurrent streams: {time.time() - t0:.2f} s", flush=True)


def cancelled(m):
    return m.get('omni_requests_total{outcome="cancelled"}', 0)


def test_disconnect(s):
    m0 = s.metrics()
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    body = json.dumps({"model": MODEL, "messages": user("Hello there"), "temperature": 0,  # no early EOS
                       "max_tokens": LONG, "stream": True})
    c.request("POST", "/v1/chat/completions", body=body,
              headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    r = c.getresponse()
    first = r.readline()
    check(r.status == 200 and first.startswith(b"data: "), f"stream start: {r.status} {first[:80]!r}")
    t0 = time.time()  # /metrics shows the engine's state after its last step: wait for it to count our pages
    while time.time() - t0 < 15 and s.pages_used() == 0:
        time.sleep(0.02)
    used = s.pages_used()
    check(used > 0, f"pages in use while streaming: {used}")
    c.sock.close()
    c.close()
    t0 = time.time()
    while time.time() - t0 < 15 and (s.pages_used() != 0 or cancelled(s.metrics()) == cancelled(m0)):
        time.sleep(0.01)
    dt = time.time() - t0
    m = s.metrics()
    check(s.pages_used() == 0, f"pages back after a disconnect: {s.pages_used()}")
    check(cancelled(m) - cancelled(m0) == 1, f"one cancelled request in /metrics: {cancelled(m) - cancelled(m0)}")
    check(m["omni_generated_tokens_total"] - m0["omni_generated_tokens_total"] < LONG, "the job did not run to the end")
    print(f"disconnect: {used:.0f} pages in use, back {dt * 1e3:.0f} ms after the client left", flush=True)


def open_stream(s, n):
    """A streamed chat request left open; returns the connection after its headers arrived."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": MODEL, "messages": user("Hello there"), "temperature": 0, "max_tokens": n, "stream": True}),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    return c


def test_queue(refs):
    """One sequence at a time and one waiting: a third request gets 503; the others go on, then all pages return."""
    s = Server(TEXT, "--max-seqs", "1", "--max-queue", "1", "-c", "32768", "--max-tokens", str(LONG))
    try:
        a = open_stream(s, LONG)
        t0 = time.time()
        while time.time() - t0 < 15 and s.metrics()["omni_requests_running"] < 1:
            time.sleep(0.02)
        b = open_stream(s, LONG)
        while time.time() - t0 < 15 and s.metrics()["omni_requests_queued"] < 1:
            time.sleep(0.02)
        m = s.metrics()
        check(m["omni_requests_running"] == 1 and m["omni_requests_queued"] == 1, f"running/queued: {m}")
        status, data = s.request("POST", "/v1/chat/completions", {"messages": user(PROMPTS[0]), "max_tokens": 4})
        error_shape(status, data, 503, "queue full")
        for c in (a, b):
            c.sock.close()
        while time.time() - t0 < 30 and (s.pages_used() != 0 or s.metrics()["omni_requests_queued"] != 0
                                         or s.metrics()["omni_requests_running"] != 0):
            time.sleep(0.02)
        check(s.pages_used() == 0, f"pages back after the queue test: {s.pages_used()}")
        still_serving(s, client(s), refs[PROMPTS[0]], "a full queue")
    finally:
        check(s.stop() == 0, "queue server exit code")


def test_bad(s, refs):
    cl = client(s)
    ref = refs[PROMPTS[0]]
    good = {"model": MODEL, "messages": user(PROMPTS[0]), "temperature": 0, "max_tokens": N}
    cases = [
        ("invalid JSON", b'{"messages": [', 400),
        ("not an object", b"[1, 2]", 400),
        ("messages not a list", dict(good, messages="hi"), 400),
        ("content a number", dict(good, messages=[{"role": "user", "content": 5}]), 400),
        ("temperature a string", dict(good, temperature="hot"), 400),
        ("max_tokens negative", dict(good, max_tokens=-5), 400),
        ("max_tokens over the limit", dict(good, max_tokens=10 ** 7), 400),
        ("stream not a bool", dict(good, stream="yes"), 400),
        ("unknown role", dict(good, messages=[{"role": "wizard", "content": "x"}]), 400),
        ("unknown model", dict(good, model="gpt-4o"), 404),
        ("corrupt base64 image", dict(good, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K!!!!"}}]}]), 400),
        ("remote image URL", dict(good, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]), 400),
        ("body over the limit", json.dumps(dict(good, messages=user("x" * 100000))), 413),
    ]
    for what, body, want in cases:
        status, data = s.request("POST", "/v1/chat/completions", body)
        error_shape(status, data, want, what)
        still_serving(s, cl, ref, what)
    # audio for a model without an audio tower: said so (it was a placeholder-count message)
    status, data = s.request("POST", "/v1/chat/completions", dict(good, messages=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]}]))
    if error_shape(status, data, 400, "audio for a text model"):
        check("no audio tower" in json.loads(data)["error"]["message"], f"audio for a text model: {data[:300]!r}")
    status, data = s.request("POST", "/v1/chat/completions", good, key=None)
    error_shape(status, data, 401, "missing API key")
    status, data = s.request("POST", "/v1/chat/completions", good, key="wrong")
    error_shape(status, data, 401, "wrong API key")
    status, data = s.request("GET", "/v1/nothing")
    error_shape(status, data, 404, "unknown path")
    try:
        chat(client(s, key="wrong"), user(PROMPTS[0]))
        check(False, "wrong key accepted by the openai client")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"openai client: {e}")
    try:
        client(s).chat.completions.create(model="no-such-model", messages=user("x"), max_tokens=2)
        check(False, "unknown model accepted")
    except openai.NotFoundError as e:
        check(e.status_code == 404, f"openai client: {e}")
    try:
        client(s).chat.completions.create(model=MODEL, messages=user("x"), max_tokens=2, temperature=7)
        check(False, "temperature 7 accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"openai client: {e}")
    still_serving(s, cl, ref, "the bad requests")


def test_vision():
    vdir = model_with_tokenizer(os.path.join(FIXTURES, "vision", "vl-h64"))
    img = os.path.join(FIXTURES, "vision", "a_exact.png")
    q = "What is in the image?"
    ref = generate(vdir, q, 12, "--image", img)
    s = Server(vdir, "--allow-files", "--max-image-mpixels", "0.02")
    try:
        cl = client(s)
        parts = [{"type": "image_url", "image_url": {"url": data_url(img, "image/png")}}, {"type": "text", "text": q}]
        r = cl.chat.completions.create(model="vl-h64", messages=[{"role": "user", "content": parts}], temperature=0,
                                       max_tokens=12)
        check(r.choices[0].message.content == ref, f"image: {r.choices[0].message.content!r} != {ref!r}")
        check(r.usage.prompt_tokens > 12, f"image tokens counted in usage: {r.usage}")
        parts[0] = {"type": "image_url", "image_url": {"url": "file://" + os.path.abspath(img)}}
        r = cl.chat.completions.create(model="vl-h64", messages=[{"role": "user", "content": parts}], temperature=0,
                                       max_tokens=12)
        check(r.choices[0].message.content == ref, f"image file (--allow-files): {r.choices[0].message.content!r}")
        bad = [("not an image", "data:image/png;base64," + b64(os.path.join(FIXTURES, "tok-small", "tokenizer_config.json"))),
               ("truncated PNG", data_url(img, "image/png")[:200]),
               ("over the pixel limit", data_url(os.path.join(FIXTURES, "vision", "b_down.png"), "image/png")),  # 30000 px
               ("missing file", "file:///nonexistent/x.png")]
        for what, url in bad:
            body = {"model": "vl-h64", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": q}]}], "max_tokens": 4}
            status, data = s.request("POST", "/v1/chat/completions", body)
            error_shape(status, data, 400, what)
        r = cl.chat.completions.create(model="vl-h64", messages=[{"role": "user", "content": parts}], temperature=0,
                                       max_tokens=12)
        check(r.choices[0].message.content == ref, "image answer after the bad images")
    finally:
        check(s.stop() == 0, "vision server exit code")
    # a request whose images take it over the context (-c 40; 12 visual tokens each, from the PNG header) is refused
    # before any image is decoded or encoded
    s = Server(vdir, "-c", "40")
    try:
        img_part = {"type": "image_url", "image_url": {"url": data_url(img, "image/png")}}
        body = {"messages": [{"role": "user", "content": [img_part, img_part, {"type": "text", "text": q}]}],
                "max_tokens": 4}
        status, data = s.request("POST", "/v1/chat/completions", body)
        if error_shape(status, data, 400, "images over the context"):
            check(json.loads(data)["error"]["code"] == "context_length_exceeded", f"code: {data[:300]!r}")
        check("image: 'image'" not in s.text(), "images encoded before the context was checked:\n" + s.text())
        body["messages"][0]["content"] = [img_part, {"type": "text", "text": q}]
        status, data = s.request("POST", "/v1/chat/completions", body)
        check(status == 200 and "image: 'image'" in s.text(), f"one image within the context: {status} {data[:300]!r}")
    finally:
        check(s.stop() == 0, "vision -c 40 server exit code")


def test_audio():
    adir = os.path.join(FIXTURES, "audio", "omni-b")
    clip = os.path.join(FIXTURES, "audio", "clips", "tone_1s.wav")
    img = os.path.join(FIXTURES, "audio", "clips", "pattern_64x96.png")
    q = "What do you hear?"
    ref = generate(adir, q, 12, "--audio", clip)
    ref_ai = generate(adir, q, 12, "--audio", clip, "--image", img)
    s = Server(adir, "--max-audio-seconds", "5")
    try:
        cl = client(s)
        audio = {"type": "input_audio", "input_audio": {"data": b64(clip), "format": "wav"}}
        r = cl.chat.completions.create(model="omni-b", messages=[{"role": "user", "content": [
            audio, {"type": "text", "text": q}]}], temperature=0, max_tokens=12)
        check(r.choices[0].message.content == ref, f"audio: {r.choices[0].message.content!r} != {ref!r}")
        text, _, _ = stream_text_model(cl, "omni-b", [{"role": "user", "content": [
            audio, {"type": "image_url", "image_url": {"url": data_url(img, "image/png")}},
            {"type": "text", "text": q}]}], 12)
        check(text == ref_ai, f"audio + image stream: {text!r} != {ref_ai!r}")
        # two clips in one message are encoded as one batch, as the CLI and transformers' processor do (the short
        # clip is padded with the long one: one more mel frame, one more audio token than alone)
        c1, c2 = (os.path.join(FIXTURES, "audio", "clips", f) for f in ("tone_3p3s.wav", "tone_0p402s.wav"))
        ref2 = generate(adir, q, 12, "--audio", c1, "--audio", c2)
        r = cl.chat.completions.create(model="omni-b", messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": b64(c1), "format": "wav"}},
            {"type": "input_audio", "input_audio": {"data": b64(c2), "format": "wav"}},
            {"type": "text", "text": q}]}], temperature=0, max_tokens=12)
        check(r.choices[0].message.content == ref2, f"two clips: {r.choices[0].message.content!r} != {ref2!r}")
        long_clip = os.path.join(FIXTURES, "audio", "clips", "tone_9s.wav")
        bad = [("audio over the duration limit", {"data": b64(long_clip), "format": "wav"}),
               ("audio that is not audio", {"data": b64(img), "format": "wav"}),
               ("corrupt base64 audio", {"data": "UklGR!!!", "format": "wav"})]
        for what, ia in bad:
            body = {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": ia}]}],
                    "max_tokens": 4}
            status, data = s.request("POST", "/v1/chat/completions", body)
            error_shape(status, data, 400, what)
        body = {"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "file://" + os.path.abspath(img)}}]}], "max_tokens": 4}
        status, data = s.request("POST", "/v1/chat/completions", body)
        error_shape(status, data, 400, "local path without --allow-files")
        r = cl.chat.completions.create(model="omni-b", messages=[{"role": "user", "content": [
            audio, {"type": "text", "text": q}]}], temperature=0, max_tokens=12)
        check(r.choices[0].message.content == ref, "audio answer after the bad requests")
    finally:
        check(s.stop() == 0, "audio server exit code")


def stream_text_model(cl, model, messages, n):
    global MODEL
    saved, MODEL = MODEL, model
    try:
        return stream_text(cl, messages, n)
    finally:
        MODEL = saved


MODEL = os.path.basename(TEXT)


def test_shutdown_inflight(s):
    """SIGTERM with a stream and a whole request in flight: both are answered (the stream's error event and
    [DONE], a 503) before the server exits with 0."""
    a = open_stream(s, LONG)
    w = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    w.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": MODEL, "messages": user("Hello there"), "temperature": 0, "max_tokens": LONG}),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + KEY})
    r = a.getresponse()
    first = r.readline()
    t0 = time.time()
    while time.time() - t0 < 15 and s.metrics()["omni_requests_running"] < 2:
        time.sleep(0.02)
    check(r.status == 200 and first.startswith(b"data: ") and s.metrics()["omni_requests_running"] == 2,
          "two requests in flight before SIGTERM")
    code = s.stop()
    try:
        rest = r.read()
    except (http.client.HTTPException, OSError) as e:
        rest = f"exception: {e!r}".encode()
    check(b'"error"' in rest and rest.endswith(b"data: [DONE]\n\n"), f"stream at SIGTERM: ...{rest[-300:]!r}")
    try:
        wr = w.getresponse()
        status, body = wr.status, wr.read()
    except (http.client.HTTPException, OSError) as e:
        status, body = -1, f"exception: {e!r}".encode()
    error_shape(status, body, 503, "whole request at SIGTERM")
    check(code == 0, f"exit code after SIGTERM with requests in flight: {code}")


def test_llama_endpoints(s):
    """llama-server's /tokenize, /detokenize and /props, and CORS (a browser's preflight needs no key)."""
    text = "Hello world, <|im_start|> ünïcödé"
    want = [int(t) for t in subprocess.run([OMNI, "tokenize", "-m", TEXT, "-p", text], capture_output=True,
                                           timeout=60, check=True).stdout.split()]
    status, data = s.request("POST", "/tokenize", {"content": text})
    check(status == 200 and json.loads(data)["tokens"] == want, f"/tokenize: {data[:300]!r} != {want}")
    status, data = s.request("POST", "/tokenize", {"content": text, "with_pieces": True})
    pieces = json.loads(data)["tokens"] if status == 200 else []
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    check([p["id"] for p in pieces] == want and joined == text.encode(), f"/tokenize with_pieces: {data[:300]!r}")
    status, data = s.request("POST", "/detokenize", {"tokens": want})
    check(status == 200 and json.loads(data)["content"] == text, f"/detokenize: {data[:300]!r}")
    for what, path, body in [("detokenize an id past the vocabulary", "/detokenize", {"tokens": [10 ** 9]}),
                             ("tokenize without content", "/tokenize", {"text": "x"})]:
        status, data = s.request("POST", path, body)
        error_shape(status, data, 400, what)
    status, data = s.request("GET", "/props")
    p = json.loads(data) if status == 200 else {}
    check(status == 200 and p["default_generation_settings"]["n_ctx"] == 32768 and p["total_slots"] == 16
          and p["modalities"] == {"vision": True, "audio": False} and p["model_path"] == MODEL,
          f"/props: {data[:400]!r}")
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://localhost:3000",
              "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"})
    r = c.getresponse()
    r.read()
    c.close()
    check(r.status == 204 and r.getheader("Access-Control-Allow-Origin") == "*"
          and "POST" in (r.getheader("Access-Control-Allow-Methods") or "")
          and r.getheader("Access-Control-Allow-Headers") == "authorization, content-type", f"preflight: {r.status} "
          f"{r.getheaders()}")
    status, data = s.request("GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    check(status == 200, "a request with an Origin header")


def test_signal_while_loading():
    """SIGTERM (exit 0) or Ctrl+C (exit 130) while the model loads: the start stops after the step under way, without
    listening; the signal is sent the moment "serve: loading" is logged, 10 times each (the load of a fixture is short:
    at least one run must land in it)."""
    vdir = os.path.join(FIXTURES, "audio", "omni-b")
    for sig, want in ((signal.SIGTERM, 0), (signal.SIGINT, 130)):
        in_load = 0
        for _ in range(10):
            log = tempfile.NamedTemporaryFile(prefix="omni-serve-load-", suffix=".log", delete=False)
            p = subprocess.Popen([OMNI, "serve", "-m", vdir, "--port", "0"], stdout=subprocess.DEVNULL, stderr=log,
                                 stdin=subprocess.DEVNULL)
            deadline = time.time() + 60
            text = ""
            while time.time() < deadline and p.poll() is None and "serve: loading" not in text:
                with open(log.name, errors="replace") as f:
                    text = f.read()
                time.sleep(0.0005)
            p.send_signal(sig)
            try:
                code = p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                code = p.wait(10)
            with open(log.name, errors="replace") as f:
                text = f.read()
            os.unlink(log.name)
            loading = "stopped while loading the model" in text
            in_load += loading
            check(code == want and (loading or "serve: stopping" in text) and ("listening" in text) != loading,
                  f"{sig.name} at 'loading': exit {code} (want {want}):\n{text}")
        check(in_load > 0, f"{sig.name}: no run stopped while loading (the test did not exercise it)")
        print(f"{sig.name} while loading: {in_load} of 10 runs stopped before listening", flush=True)


def main():
    refs = {p: generate(TEXT, p, N) for p in PROMPTS}
    s = Server(TEXT, "--max-seqs", "16", "-c", "32768", "--max-tokens", str(LONG), "--max-body", "0.0625")
    try:
        test_text(s, refs)
        test_concurrent(s, refs)
        test_disconnect(s)
        test_bad(s, refs)
        test_llama_endpoints(s)
        test_shutdown_inflight(s)
    finally:
        check(s.stop() == 0, "text server exit code after SIGTERM")
    test_queue(refs)
    test_vision()
    test_audio()
    test_signal_while_loading()
    finish()


if __name__ == "__main__":
    main()
