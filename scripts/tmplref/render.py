#!/usr/bin/env python3
"""Renders the reference outputs for text/template's conformance tests.

Chat templates are rendered by transformers itself: AutoTokenizer.from_pretrained(<model
dir>).apply_chat_template(..., tokenize=False), so the special tokens, template choice and
Jinja2 environment are transformers' own. The feature templates (testdata/features.json,
features_extra.json) are rendered by transformers' compiled environment
(chat_template_utils._compile_jinja_template).
strftime_now is pinned to NOW by patching the datetime that chat_template_utils reads.

Without transformers (a machine with only jinja2) --emulate renders with an
environment built like transformers' (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, its tojson/raise_exception/strftime_now); the output
records which engine made it, and the committed fixtures must come from transformers.

Usage: render.py MODELS_DIR TESTDATA_DIR OUT_DIR [--emulate]
  MODELS_DIR/<model>/ holds tokenizer_config.json (+ tokenizer.json or tokenizer.json.xz).
"""
import datetime as _dt
import json
import lzma
import os
import shutil
import sys
import tempfile

NOW = _dt.datetime(2026, 7, 26, 9, 5, 3)


class FrozenDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


def emulated_compile(source):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def error_of(e):
    return {"type": type(e).__name__, "message": str(e)}


def main():
    models_dir, testdata, out_dir = sys.argv[1:4]
    emulate = "--emulate" in sys.argv
    engine = {"now": NOW.isoformat()}
    compile_template = emulated_compile
    if not emulate:
        import jinja2
        import transformers
        from transformers import AutoTokenizer
        from transformers.utils import chat_template_utils

        chat_template_utils.datetime = FrozenDatetime
        compile_template = chat_template_utils._compile_jinja_template
        engine.update(transformers=transformers.__version__, jinja2=jinja2.__version__)
    else:
        import jinja2
        engine.update(emulated_with_jinja2=jinja2.__version__)

    spec = json.load(open(os.path.join(testdata, "conversations.json")))
    chat = {"engine": engine, "models": {}, "cases": []}
    for model in spec["models"]:
        src = os.path.join(models_dir, model)
        info = {}
        chat["models"][model] = info
        if emulate:
            tok = None
        else:
            tmp = tempfile.mkdtemp()
            for name in os.listdir(src):
                if name.endswith(".xz"):
                    with lzma.open(os.path.join(src, name)) as f, open(os.path.join(tmp, name[:-3]), "wb") as g:
                        shutil.copyfileobj(f, g)
                else:
                    shutil.copy(os.path.join(src, name), tmp)
            try:
                tok = AutoTokenizer.from_pretrained(tmp)
                info["tokenizer_class"] = type(tok).__name__
                info["special_tokens"] = {k: str(v) for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
            except Exception as e:  # render with transformers' environment, special tokens from the config
                info["tokenizer_error"] = error_of(e)
                tok = None
        if tok is not None:
            has_template = tok.chat_template is not None
        else:
            has_template = json.load(open(os.path.join(src, "tokenizer_config.json"))).get("chat_template") is not None
        info["has_chat_template"] = has_template
        for conv_name, messages in spec["conversations"].items():
            for opt in spec["options"]:
                if not has_template and (conv_name, opt["name"]) != ("single-user", "plain"):
                    continue  # one case shows that rendering fails
                if conv_name in spec.get("gen_only", []) and opt["name"] != "gen":
                    continue
                case = {"model": model, "conversation": conv_name, "options": opt["name"]}
                kwargs = dict(opt.get("kwargs", {}))
                tools = spec["tools"] if opt.get("tools") else None
                documents = spec["documents"] if opt.get("documents") else None
                try:
                    if tok is not None:
                        case["output"] = tok.apply_chat_template(
                            messages, tools=tools, documents=documents,
                            add_generation_prompt=opt["add_generation_prompt"], tokenize=False, **kwargs)
                    else:
                        cfg = json.load(open(os.path.join(src, "tokenizer_config.json")))
                        tmpl = cfg.get("chat_template")
                        if tmpl is None:
                            raise ValueError("no chat template")
                        if isinstance(tmpl, list):
                            named = {t["name"]: t["template"] for t in tmpl}
                            tmpl = named["tool_use"] if tools is not None and "tool_use" in named else named["default"]
                        special = {}
                        for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
                            v = cfg.get(k)
                            if isinstance(v, dict):
                                v = v.get("content")
                            if v:
                                special[k] = v
                        case["output"] = compile_template(tmpl).render(
                            messages=messages, tools=tools, documents=documents,
                            add_generation_prompt=opt["add_generation_prompt"], **{**special, **kwargs})
                except Exception as e:  # the Go side must fail too
                    case["error"] = error_of(e)
                chat["cases"].append(case)

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "chat_reference.json"), "w") as f:
        json.dump(chat, f, ensure_ascii=False, indent=0)
    counts = {}
    for base in ("features", "features_extra"):
        path = os.path.join(testdata, base + ".json")
        if not os.path.exists(path):
            continue
        feat_out = {"engine": engine, "cases": []}
        for feat in json.load(open(path)):
            case = {"name": feat["name"]}
            try:
                case["output"] = compile_template(feat["template"]).render(**feat.get("vars", {}))
            except Exception as e:
                case["error"] = error_of(e)
            feat_out["cases"].append(case)
        with open(os.path.join(out_dir, base + "_reference.json"), "w") as f:
            json.dump(feat_out, f, ensure_ascii=False, indent=0)
        counts[base] = len(feat_out["cases"])
    print("rendered", len(chat["cases"]), "chat cases and feature cases", counts, "with", engine)


if __name__ == "__main__":
    main()
