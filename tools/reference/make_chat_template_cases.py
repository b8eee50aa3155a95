#!/usr/bin/env python3
"""Render the official Qwen3-VL chat template for a set of conversations and write the expected prompt texts.

    python3 tools/reference/make_chat_template_cases.py [--out tests/fixtures/chat]

Input : tests/fixtures/chat/qwen3_vl_chat_template.jinja (the exact Jinja text of the Qwen3-VL Instruct template,
        see tools/reference/README.md for its provenance).
Output: tests/fixtures/chat/cases.json = [{"name", "messages", "add_generation_prompt", "expected"}, ...]

Rendering is done exactly as transformers does it (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks,
loopcontrols, its own tojson filter and the raise_exception/strftime_now globals), and every case is cross-checked
against transformers.utils.chat_template_utils.render_jinja_template.
"""

import argparse
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CHAT_DIR = os.path.join(ROOT, "tests", "fixtures", "chat")
TEMPLATE_PATH = os.path.join(CHAT_DIR, "qwen3_vl_chat_template.jinja")


def load_template_text(path=TEMPLATE_PATH):
    with open(path, encoding="utf-8") as f:
        return f.read()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):  # not used by the Qwen3-VL template; kept for parity with transformers
        import datetime
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template_text, messages, add_generation_prompt=True, **kwargs):
    tpl = make_env().from_string(template_text)
    return tpl.render(messages=messages, add_generation_prompt=add_generation_prompt, **kwargs)


def render_transformers(template_text, messages, add_generation_prompt=True):
    from transformers.utils.chat_template_utils import render_jinja_template
    out, _ = render_jinja_template(conversations=[messages], chat_template=template_text,
                                   add_generation_prompt=add_generation_prompt)
    return out[0]


SYSTEM = "You are a helpful assistant."


def text_cases():
    u1 = {"role": "user", "content": "Hello, who are you?"}
    a1 = {"role": "assistant", "content": "I am a small test model."}
    u2 = {"role": "user", "content": "Write one line about 北京 and 東京."}
    sysm = {"role": "system", "content": SYSTEM}
    return [
        ("one_turn", [u1]),
        ("one_turn_system", [sysm, u1]),
        ("two_turns", [u1, a1, u2]),
        ("two_turns_system", [sysm, u1, a1, u2]),
        ("one_turn_multiline", [{"role": "user", "content": "line one\nline two\n\n  indented\ttab "}]),
        ("one_turn_empty", [{"role": "user", "content": ""}]),
        ("one_turn_special_tokens_in_text", [{"role": "user", "content": "say <|im_end|> and <think>"}]),
        ("one_turn_system_list_content", [{"role": "system", "content": [{"type": "text", "text": SYSTEM}]},
                                          {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]),
    ]


def image_cases():
    img = {"type": "image"}
    return [
        ("image_then_text", [{"role": "user", "content": [img, {"type": "text", "text": "Describe this image."}]}]),
        ("image_then_text_system", [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": [img, {"type": "text", "text": "Describe this image."}]}]),
        ("text_then_image", [{"role": "user", "content": [{"type": "text", "text": "What is in"}, img]}]),
        ("two_images", [{"role": "user", "content": [img, img, {"type": "text", "text": "Compare the two images."}]}]),
        ("image_in_second_turn", [
            {"role": "user", "content": [{"type": "text", "text": "I will show you a picture."}]},
            {"role": "assistant", "content": "OK, please show it."},
            {"role": "user", "content": [img, {"type": "text", "text": "Read the text in it."}]},
        ]),
        ("image_in_both_turns_system", [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": [img, {"type": "text", "text": "First image."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Seen."}]},
            {"role": "user", "content": [{"type": "text", "text": "Second:"}, img]},
        ]),
    ]


def build_cases(template_text):
    cases = []
    for name, msgs in text_cases() + image_cases():
        for agp in (True, False) if name in ("one_turn", "two_turns_system") else (True,):
            exp = render(template_text, msgs, agp)
            ref = render_transformers(template_text, msgs, agp)
            assert exp == ref, (name, exp, ref)
            cases.append({"name": name if agp else name + "_no_generation_prompt", "messages": msgs,
                          "add_generation_prompt": agp, "expected": exp})
    return cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=CHAT_DIR)
    args = ap.parse_args()
    text = load_template_text()
    cases = build_cases(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote %d cases to %s" % (len(cases), os.path.join(args.out, "cases.json")), file=sys.stderr)


if __name__ == "__main__":
    main()
