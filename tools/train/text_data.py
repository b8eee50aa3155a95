"""Text corpus for the embedded text model: Python source code and documentation installed with Python.

Recipe:
  training  every *.py file of the Python installation running the script (the standard library of
            sysconfig's "stdlib" path minus the held-out files, plus everything under site-packages: on the GPU
            host torch, transformers, jax, numpy, scipy, ...), shuffled by seed, each file followed by
            <|endoftext|>, packed into SEQ_LEN-token rows (no document masking).
  held out  standard-library files whose path relative to the stdlib directory has crc32 % 10 == 0 (is_heldout);
            these are never trained on, on any machine, and are the evaluation texts here (Python 3.11) and on the
            GPU host (its own Python's versions of the same files).
  passkey   PASSKEY_FRACTION of the rows are retrieval exercises: real code as filler, the sentence
            PASSKEY_FMT with a random 5-digit key inserted at a random depth, and QUESTION + key at the end.
"""

import os
import sysconfig
import zlib

SEQ_LEN = 4096
PASSKEY_FRACTION = 0.08
PASSKEY_FMT = "\n# The pass key is {key}. Remember it. {key} is the pass key.\n"
QUESTION = "\n# What is the pass key? The pass key is"
ANSWER_FMT = " {key}.\n"


def stdlib_dir():
    return sysconfig.get_paths()["stdlib"]


def site_dirs():
    out = []
    for k in ("purelib", "platlib"):
        p = sysconfig.get_paths()[k]
        if p not in out and os.path.isdir(p):
            out.append(p)
    return out


def is_heldout(rel):
    return zlib.crc32(rel.replace(os.sep, "/").encode()) % 10 == 0


def _walk(top, skip=()):
    for dp, dn, fn in os.walk(top):
        dn[:] = sorted(d for d in dn if d not in ("__pycache__",) and os.path.join(dp, d) not in skip)
        for f in sorted(fn):
            if f.endswith(".py"):
                yield os.path.join(dp, f)


def stdlib_files(heldout):
    """Sorted stdlib .py paths, held-out ones (heldout=True) or the training ones (False)."""
    top = stdlib_dir()
    skip = tuple(os.path.join(top, d) for d in ("site-packages", "dist-packages"))
    return [p for p in _walk(top, skip) if is_heldout(os.path.relpath(p, top)) == heldout]


def training_files():
    files = stdlib_files(heldout=False)
    for d in site_dirs():
        files += list(_walk(d))
    seen, out = set(), []
    for p in files:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def read(path, limit=400_000):
    try:
        with open(path, encoding="utf-8") as f:
            s = f.read(limit + 1)
    except (UnicodeDecodeError, OSError):
        return None
    return s if 0 < len(s) <= limit else None


def passkey_row(rng, filler, tok, n):
    """One n+1-token passkey exercise built from filler token ids (>= n of them). Returns (ids, key)."""
    key = str(rng.integers(10000, 100000))
    ins = tok.encode(PASSKEY_FMT.format(key=key), add_special_tokens=False).ids
    end = tok.encode(QUESTION, add_special_tokens=False).ids + tok.encode(ANSWER_FMT.format(key=key),
                                                                          add_special_tokens=False).ids
    body = n + 1 - len(ins) - len(end)
    at = int(rng.integers(0, body + 1))
    ids = list(filler[:at]) + ins + list(filler[at:body]) + end
    return ids, key


def passkey_prompt(tok, filler_text, key, depth, n_tokens):
    """Evaluation prompt of about n_tokens tokens: filler with the key sentence at depth (0..1), then QUESTION.
    Returns the prompt text (the expected continuation is ' KEY.')."""
    ids = tok.encode(filler_text, add_special_tokens=False).ids
    ins = PASSKEY_FMT.format(key=key)
    q = QUESTION
    budget = n_tokens - len(tok.encode(ins + q, add_special_tokens=False).ids)
    ids = ids[:budget]
    at = int(round(depth * len(ids)))
    # cut at line boundaries so the text decodes cleanly
    pre = tok.decode(ids[:at])
    post = tok.decode(ids[at:])
    pre = pre[:pre.rfind("\n")] if "\n" in pre else pre
    return pre + ins + post + q
