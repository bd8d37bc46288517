#!/usr/bin/env python3
"""Render the chat-template fixtures with transformers' own renderer.

Writes tests/fixtures/chat_templates/renders.json: for every template in that folder (real
models' templates, from llama.cpp's models/templates/ as shipped in the llama-cpp-python
0.3.36 sdist) and every conversation below, the text transformers renders. The Rust test
tests/chat_templates.rs renders the same with minijinja (src/model/chat.rs) and requires
byte equality.

transformers' renderer (transformers.utils.chat_template_utils.render_jinja_template, what
tokenizer.apply_chat_template calls) is not bare jinja2: an ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension, its own tojson
(json.dumps, ensure_ascii=False), raise_exception and strftime_now, and tools=None /
documents=None always passed. strftime_now reads datetime.now(), pinned here to PINNED_NOW
(Llama-3.2's template prints today's date).

Usage (no hub access needed; templates are read from the folder):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install transformers jinja2
    /tmp/venv/bin/python scripts/chat_template_fixtures.py
"""
import datetime as _dt
import json
import pathlib
import sys

import transformers
import transformers.utils.chat_template_utils as ctu

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "chat_templates"

# The date and time strftime_now sees (a single-digit day checks %d's zero padding).
PINNED_NOW = _dt.datetime(2025, 3, 9, 14, 5, 6)


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


# BOS/EOS strings of each model, as its tokenizer_config.json on the hub declares them
# (None: the model has none, and transformers passes nothing under that name).
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B": (None, "<|im_end|>"),
    "Qwen-QwQ-32B": (None, "<|im_end|>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (
        "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
        "<\uff5cend\u2581of\u2581sentence\uff5c>",
    ),
}

SYSTEM = {"role": "system", "content": "You are a concise assistant. Answer in one sentence."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "Wie heißt die Hauptstadt von Österreich? 🇦🇹\nKurz, bitte."}
THINKING = {
    "role": "assistant",
    "content": "<think>\nThe user asks for France's capital.\n</think>\n\nParis.",
}

# (name, messages, add_generation_prompt)
CONVERSATIONS = [
    ("user", [USER], True),
    ("system_user", [SYSTEM, USER], True),
    ("multi_turn", [SYSTEM, USER, ASSISTANT, USER2], True),
    ("multi_turn_no_system", [USER, ASSISTANT, USER2], True),
    ("history_no_generation_prompt", [SYSTEM, USER, ASSISTANT], False),
    ("history_with_thinking", [USER, THINKING, USER2], True),
    # Not alternating: Mistral-Nemo's template raises an exception (our render must fail too).
    ("two_user_turns", [USER, USER2], True),
]


def render(template, messages, add_generation_prompt, bos, eos, extra):
    kwargs = dict(extra)
    if bos is not None:
        kwargs["bos_token"] = bos
    if eos is not None:
        kwargs["eos_token"] = eos
    rendered, _ = ctu.render_jinja_template(
        conversations=[messages],
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return rendered[0]


def main():
    ctu.datetime = _PinnedDatetime
    cases = []
    for name, (bos, eos) in TEMPLATES.items():
        template = (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8")
        thinking_switch = "enable_thinking" in template
        variants = [{}]
        if thinking_switch:
            variants += [{"enable_thinking": True}, {"enable_thinking": False}]
        for conv, messages, agp in CONVERSATIONS:
            for extra in variants:
                try:
                    text = render(template, messages, agp, bos, eos, extra)
                    error = None
                except Exception as e:  # a template may refuse a conversation: record it
                    text, error = None, f"{type(e).__name__}: {e}"
                cases.append(
                    {
                        "template": name,
                        "conversation": conv,
                        "messages": messages,
                        "add_generation_prompt": agp,
                        "bos_token": bos,
                        "eos_token": eos,
                        "enable_thinking": extra.get("enable_thinking"),
                        "expected": text,
                        "error": error,
                    }
                )
    doc = {
        "about": "Chat templates rendered by transformers' render_jinja_template "
        "(scripts/chat_template_fixtures.py); strftime_now pinned to "
        + PINNED_NOW.isoformat(),
        "transformers": transformers.__version__,
        "jinja2": __import__("jinja2").__version__,
        "now": PINNED_NOW.isoformat(),
        "cases": cases,
    }
    out = FIXTURES / "renders.json"
    out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum(c["error"] is not None for c in cases)
    print(f"wrote {out}: {len(cases)} renders, {errors} refused by the template", file=sys.stderr)


if __name__ == "__main__":
    main()
