#!/usr/bin/env python3
"""Differential fuzzing of text/template against Jinja2 (a development tool).

Generates random templates from a grammar of the Jinja2 features chat templates use,
renders each with Jinja2 in transformers' environment (render.py's emulation) and with
text/template (scripts/tmplref/gorender), and reports every case where the outputs
differ, or where only one side fails. Needs python3 with jinja2 and Go.

Usage: fuzzdiff.py [N] [SEED]      (from the repository root; default 2000 templates)
"""
import copy
import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from render import emulated_compile  # noqa: E402

VARS = {
    "s": "  Héllo, World! <tag> \"q\" 'a'\n\tx  ",
    "t": "a,b,,c",
    "n": 7,
    "m": -3,
    "f": 2.5,
    "g": 0.1,
    "b": True,
    "z": None,
    "l": [3, 1, 2, 1],
    "w": ["b", "A", "c", "a"],
    "d": {"k": "v", "n": 1, "list": [1, 2], "nested": {"x": None}},
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": " hi "},
        {"role": "assistant", "content": "<think>\nr\n</think>\n\nans", "tool_calls": [
            {"function": {"name": "f", "arguments": {"b": 1, "a": [1.5, "x"]}}}]},
        {"role": "tool", "content": "42"},
    ],
}

STR_LITS = ["''", "'a'", "'abc'", "\"x y\"", "'\\n'", "' pad '", "'é😀'", "'<think>'", "','", "'%s-%d'", "'{}:{}'", "'a\\tb'"]
NUM_LITS = ["0", "1", "2", "-1", "10", "3.5", "0.1", "1e3", "2.0"]
NAMES = list(VARS) + ["u"]
STR_METHODS = ["strip()", "lstrip()", "rstrip()", "strip('a ')", "split()", "split(',')", "split(',', 1)", "rsplit(',', 1)",
               "upper()", "lower()", "title()", "capitalize()", "startswith('a')", "endswith('c')", "replace('a', 'b')",
               "replace(',', '')", "find('b')", "count('a')", "isdigit()", "splitlines()", "zfill(5)", "center(9, '*')"]
FILTERS = ["tojson(indent=1, sort_keys=true)", "tojson(separators=(',', ':'))", "join(', ', attribute='role')",
           "sort(attribute='role')|map(attribute='content')|list", "dictsort(by='value')", "unique(attribute='role')|list",
           "groupby('role')|list|length", "slice(2)|list", "sum(start=10)", "round(2)", "round(1, 'floor')",
           "center(11)", "indent(3, first=true)", "trim('a')", "replace('l', 'L', 1)", "last|string", "first|string",
           "selectattr('content')|list|length", "rejectattr('role', 'in', ['user'])|list|length", "map('upper')|join",
           "batch(3, 'F')|list", "min(attribute='role')", "max(case_sensitive=true)", "truncate(6, true)",
           "wordcount", "items|list|first", "capitalize|title", "length", "upper", "lower", "trim", "title", "capitalize", "first", "last", "list", "sort", "unique",
           "reverse|list", "join(',')", "join", "tojson", "tojson(indent=2)", "string", "int", "float", "abs", "round",
           "default('dflt')", "default('e', true)", "d", "sum", "max", "min", "items|list", "dictsort", "indent(2)",
           "select('odd')|list", "reject('none')|list", "map('string')|list", "map(attribute='role')|list",
           "selectattr('role', 'equalto', 'user')|list", "batch(2)|list", "replace('a', 'A')", "center(8)",
           "wordcount", "count", "e", "safe", "format(1, 2)", "truncate(5)"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "odd", "even", "true", "false", "boolean", "lower", "upper", "divisibleby 2", "in [1, 2]", "eq 1"]
ATTRS = [".k", ".content", "['role']", ".missing", ".get('k')", ".items()|list", ".keys()|list", ".tool_calls"]
BINOPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or", "**"]


def expr(r, depth=0):
    if depth > 3 or r.random() < 0.25:
        c = r.random()
        if c < 0.35:
            return r.choice(NAMES)
        if c < 0.6:
            return r.choice(STR_LITS)
        if c < 0.8:
            return r.choice(NUM_LITS)
        return r.choice(["none", "true", "false", "[]", "{}", "[1, 'a']", "{'a': 1, 'b': [2]}", "(1, 2)"])
    c = r.random()
    e = expr(r, depth + 1)
    if c < 0.2:
        return f"({e} {r.choice(BINOPS)} {expr(r, depth + 1)})"
    if c < 0.35:
        return f"{atom(r, depth)}|{r.choice(FILTERS)}"
    if c < 0.45:
        return f"({e} is {'not ' if r.random() < 0.3 else ''}{r.choice(TESTS)})"
    if c < 0.55:
        return f"{r.choice(['s', 't', STR_LITS[r.randrange(len(STR_LITS))]])}.{r.choice(STR_METHODS)}"
    if c < 0.65:
        return f"({e} if {expr(r, depth + 1)} else {expr(r, depth + 1)})"
    if c < 0.75:
        return f"{r.choice(['l', 'w', 's', 'msgs', 't'])}[{r.choice(['0', '-1', '1:', ':2', '::-1', '1:3', '::2', '5'])}]"
    if c < 0.82:
        return r.choice(["d", "msgs[0]", "msgs[2]", "msgs[-1]"]) + r.choice(ATTRS)
    if c < 0.88:
        return f"not {e}"
    if c < 0.94:
        return f"[{e}, {expr(r, depth + 1)}]"
    return f"-{atom(r, depth)}"


def atom(r, depth):
    e = expr(r, depth + 1)
    return e if e.replace("_", "").isalnum() else f"({e})"


def ws(r):
    return r.choice(["", "", "-", "+"]) if r.random() < 0.4 else ""


def text(r):
    return r.choice(["", "", "x", "\n", "  ", "\n  ", " a\n\n", "\t"])


def block(r, depth=0):
    parts = []
    for _ in range(r.randint(1, 4)):
        c = r.random()
        parts.append(text(r))
        if c < 0.35 or depth > 2:
            parts.append(f"{{{{{ws(r)} {expr(r)} {ws(r)}}}}}")
        elif c < 0.5:
            parts.append(f"{{%{ws(r)} if {expr(r)} {ws(r)}%}}{block(r, depth + 1)}{{%{ws(r)} elif {expr(r)} %}}{block(r, depth + 1)}"
                         f"{{% else {ws(r)}%}}{block(r, depth + 1)}{{%{ws(r)} endif {ws(r)}%}}")
        elif c < 0.65:
            it = r.choice(["l", "w", "msgs", "s", "d", "d.items()", "range(3)", "u", "t.split(',')"])
            tgt = "k, v" if it == "d.items()" else "x"
            flt = f" if {expr(r)}" if r.random() < 0.2 else ""
            body = block(r, depth + 1) + r.choice(["{{ loop.index }}", "{{ loop.first }}", "{{ loop.last }}", "{{ loop.length }}", "{{ x }}" if tgt == "x" else "{{ k }}={{ v }}", ""])
            parts.append(f"{{%{ws(r)} for {tgt} in {it}{flt} {ws(r)}%}}{body}"
                         + (f"{{% else %}}{block(r, depth + 1)}" if r.random() < 0.3 else "")
                         + f"{{%{ws(r)} endfor {ws(r)}%}}")
        elif c < 0.75:
            name = r.choice(["a", "s", "n", "x"])
            parts.append(f"{{%{ws(r)} set {name} = {expr(r)} {ws(r)}%}}")
        elif c < 0.78:
            parts.append(r.choice([
                "{% set blk %}" + block(r, depth + 2) + "{% endset %}[{{ blk|trim }}]",
                "{% filter upper %}" + block(r, depth + 2) + "{% endfilter %}",
                "{% macro wrap(x) %}<{{ x }}|{{ caller() }}>{% endmacro %}{% call wrap(" + expr(r) + ") %}" + block(r, depth + 2) + "{% endcall %}",
                "{{ '%s|%s'|format(" + expr(r) + ", " + expr(r) + ") }}",
                "{{ '{}/{}'.format(" + expr(r) + ", " + expr(r) + ") }}",
                "{% for a in l %}{% for b in w %}{{ loop.index }}{{ b if loop.first }}{% if loop.last %}{% break %}{% endif %}{% endfor %}{{ a }}{% endfor %}",
                "{% with q = " + expr(r) + " %}{{ q }}" + block(r, depth + 2) + "{% endwith %}",
            ]))
        elif c < 0.82:
            parts.append("{% set ns = namespace(v=0, s='') %}" + f"{{% for x in l %}}{{% set ns.v = ns.v + x %}}{{% set ns.s = ns.s ~ x %}}{{% endfor %}}{{{{ ns.v }}}}{{{{ ns.s }}}}")
        elif c < 0.9:
            parts.append(f"{{% macro mm(a, b='B') %}}[{{{{ a }}}}{{{{ b }}}}]{block(r, depth + 2)}{{% endmacro %}}{{{{ mm({expr(r)}) }}}}{{{{ mm(1, b={expr(r)}) }}}}")
        elif c < 0.95:
            parts.append(chat_like(r))
        else:
            parts.append(f"{{#{ws(r)} comment {ws(r)}#}}")
        parts.append(text(r))
    return "".join(parts)


def chat_like(r):
    """A loop over messages in the style of real chat templates."""
    role_test = r.choice(["m.role == 'user'", "m['role'] == 'assistant'", "m.role in ['system', 'tool']",
                          "loop.first and m.role == 'system'", "(m.role == 'user') != (loop.index0 % 2 == 0)"])
    content = r.choice(["m.content", "m['content']|trim", "m.content.strip()", "(m.content or '')",
                        "m.content.split('</think>')[-1].lstrip('\\n')", "m.content|tojson",
                        "m.tool_calls|tojson if m.tool_calls is defined else m.content",
                        "(m.content if m.content is string else m.content|map(attribute='text')|join)"])
    return (f"{{%{ws(r)} for m in msgs %}}{{%{ws(r)} if {role_test} %}}{{{{{ws(r)} '<|' + m.role + '|>\\n' + {content} + '\\n' }}}}"
            f"{{%{ws(r)} elif m.tool_calls %}}{{%- for tc in m.tool_calls %}}{{%- set tc = tc.function if tc.function else tc %}}"
            f"{{{{ tc.name }}}}:{{{{ tc.arguments|tojson }}}}{{%- endfor %}}{{% else %}}{{{{ m.role|upper }}}}{{%{ws(r)} endif %}}"
            f"{{%{ws(r)} endfor %}}{{%- if {expr(r)} %}}{{{{- '<|assistant|>\\n' }}}}{{%- endif %}}")


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    r = random.Random(seed)
    jobs, want = [], {}
    for i in range(n):
        src = block(r)
        name = f"case{i}"
        try:
            # A fresh copy each time: Jinja2's indent filter extends a list it is given in place.
            out = emulated_compile(src).render(**copy.deepcopy(VARS))
            if " at 0x" in out or "<built-in" in out or "<bound" in out:
                continue  # Python object addresses: not comparable
            want[name] = ("ok", out)
        except RecursionError:
            continue
        except Exception as e:
            want[name] = ("err", f"{type(e).__name__}: {e}")
        jobs.append({"name": name, "template": src, "vars": VARS})
    res = subprocess.run(["go", "run", "./scripts/tmplref/gorender"], input=json.dumps(jobs).encode(), capture_output=True)
    if res.returncode != 0:
        sys.exit(res.stderr.decode())
    got = {x["name"]: x for x in json.loads(res.stdout)}
    bad = 0
    for j in jobs:
        w, g = want[j["name"]], got[j["name"]]
        g_ok = "output" in g
        if w[0] == "err" and not g_ok:
            continue
        if w[0] == "ok" and g_ok and g["output"] == w[1]:
            continue
        bad += 1
        if bad <= 15:
            print("=" * 60)
            print("template:", repr(j["template"]))
            print("jinja2:  ", repr(w[1]) if w[0] == "ok" else w[1])
            print("go:      ", repr(g.get("output")) if g_ok else g["error"])
    print(f"{len(jobs)} templates, {bad} differ (seed {seed})")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
