"""test_serve_load.py - a bounded local load test of `omni serve` (127.0.0.1 only): 500 requests from 24 client
threads through the official openai client, a random mix (fixed seed) of streamed and whole chat completions and
completions over 4 prompts and 2 lengths, within 60 s. Nothing may be lost or corrupted: every request answers
200 with exactly `omni generate`'s greedy text, /metrics counts 500 more successful requests and no errors, and
every KV page is back at the end. Prints requests/s and generated tokens/s.
Usage: python test_serve_load.py OMNI_BIN FIXTURES_DIR"""
import os
import random
import threading
import time

import openai

from serve_util import FIXTURES, KEY, Server, check, finish, generate

TEXT = os.path.join(FIXTURES, "text", "qvl-h64-hd128-gqa2-tied")
MODEL = os.path.basename(TEXT)
PROMPTS = ["Hello! Who are you?", "Write a haiku about the sea.", "1, 2, 3, 4,", "Qu'est-ce que c'est ?"]
LENGTHS = [4, 12]
N_REQUESTS = 500
N_THREADS = 24
TIME_LIMIT = 60.0


def one(cl, kind, prompt, n):
    if kind == "chat":
        r = cl.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0,
                                       max_tokens=n)
        return r.choices[0].message.content
    if kind == "chat-stream":
        return "".join(c.choices[0].delta.content or "" for c in cl.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0, max_tokens=n, stream=True)
            if c.choices)
    if kind == "completion":
        return cl.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=n).choices[0].text
    return "".join(c.choices[0].text for c in cl.completions.create(
        model=MODEL, prompt=prompt, temperature=0, max_tokens=n, stream=True) if c.choices)


def main():
    refs = {}
    for p in PROMPTS:
        for n in LENGTHS:
            refs[("chat", p, n)] = generate(TEXT, p, n)
            refs[("raw", p, n)] = generate(TEXT, p, n, "--raw")
    rng = random.Random(1234)
    kinds = ["chat", "chat-stream", "completion", "completion-stream"]
    jobs = [(rng.choice(kinds), rng.choice(PROMPTS), rng.choice(LENGTHS)) for _ in range(N_REQUESTS)]
    s = Server(TEXT, "--max-seqs", "16")
    try:
        m0 = s.metrics()
        lock = threading.Lock()
        state = {"next": 0, "ok": 0, "bad": [], "tokens": 0}
        deadline = time.time() + TIME_LIMIT

        def worker():
            cl = openai.OpenAI(base_url=s.base, api_key=KEY, timeout=30, max_retries=0)
            while time.time() < deadline:
                with lock:
                    i = state["next"]
                    state["next"] += 1
                if i >= N_REQUESTS:
                    return
                kind, prompt, n = jobs[i]
                want = refs[("chat" if kind.startswith("chat") else "raw", prompt, n)]
                try:
                    got = one(cl, kind, prompt, n)
                except Exception as e:  # noqa: BLE001 - counted as a lost request
                    got = f"exception: {e!r}"
                with lock:
                    if got == want:
                        state["ok"] += 1
                    else:
                        state["bad"].append((i, kind, prompt, n, got, want))

        t0 = time.time()
        th = [threading.Thread(target=worker) for _ in range(N_THREADS)]
        for t in th:
            t.start()
        for t in th:
            t.join(TIME_LIMIT + 30)
        dt = time.time() - t0
        check(state["ok"] == N_REQUESTS, f"{state['ok']} of {N_REQUESTS} exact in {dt:.1f} s; first wrong: "
              f"{state['bad'][:3]}")
        check(dt <= TIME_LIMIT, f"took {dt:.1f} s (limit {TIME_LIMIT} s)")
        m = s.metrics()
        oks = m['omni_requests_total{outcome="ok"}'] - m0['omni_requests_total{outcome="ok"}']
        errs = m['omni_requests_total{outcome="error"}'] - m0['omni_requests_total{outcome="error"}']
        gen = m["omni_generated_tokens_total"] - m0["omni_generated_tokens_total"]
        check(oks == N_REQUESTS and errs == 0, f"/metrics: {oks} ok, {errs} errors")
        t_end = time.time()
        while time.time() - t_end < 15 and (s.pages_used() != 0 or s.metrics()["omni_requests_running"] != 0):
            time.sleep(0.05)
        check(s.pages_used() == 0, f"pages in use after the load: {s.pages_used()}")
        check(s.alive(), "server alive")
        print(f"load: {N_REQUESTS} requests from {N_THREADS} threads in {dt:.2f} s = {N_REQUESTS / dt:.1f} req/s, "
              f"{gen / dt:.0f} generated tokens/s", flush=True)
    finally:
        check(s.stop() == 0, "server exit code")
    finish()


if __name__ == "__main__":
    main()
