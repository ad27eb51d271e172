// Package template renders Hugging Face chat templates byte for byte as transformers
// does: Jinja2 in an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks
// on, keep_trailing_newline off, the loopcontrols extension, transformers' tojson,
// raise_exception and strftime_now, and the {% generation %} tag. It is a library of
// its own, with no knowledge of models or of the runner: LoadChatTemplate reads a
// checkpoint folder's template and special tokens as transformers does, and Apply
// renders messages to the prompt text as apply_chat_template does; Parse and Render
// run any template of the supported language.
//
// The engine is written here rather than taken from gonja/v2. gonja's known gaps are
// exactly where chat templates live: tojson's separators and key order, a
// parenthesised inline if (Gemma 3), str.lstrip() without an argument and replace()
// without a count; and each fix would be a patch against another engine's value
// model. Chat templates also lean on Python's semantics throughout (str(None) is
// "None", 1 == 1.0, an Undefined that prints as "" but fails on attribute access,
// per-frame scoping, insertion-ordered dicts, lazy generator filters). A focused engine
// that models Python's values directly is smaller than gonja plus its patches, and it
// is checked byte for byte against transformers and Jinja2 (testdata/, scripts/tmplref).
//
// Supported:
//   - Syntax: {{ }}, {% %}, {# #}, whitespace control with - and +, raw blocks.
//   - Statements: if/elif/else, for (tuple unpacking, an if filter, else, recursive,
//     loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem/depth/
//     cycle/changed), break/continue, set (names, tuples, namespace attributes, block
//     set with filters), macro (defaults, varargs, kwargs, caller), call blocks, filter
//     blocks, with, print, generation.
//   - Expressions with Python semantics: literals (str with Python escapes, int,
//     float, list, tuple, dict), arithmetic (+ - * / // % **), ~, comparisons
//     (chained), in / not in, and/or/not, inline if, attribute and item lookup (a
//     method first for ".", the item first for "[]", as Jinja2), slicing with steps,
//     calls with keyword, *args and **kwargs arguments.
//   - str methods: strip lstrip rstrip split rsplit splitlines startswith endswith
//     replace upper lower title capitalize swapcase casefold format join find rfind
//     index rindex count is* zfill center ljust rjust removeprefix removesuffix
//     partition rpartition; dict items keys values get copy; list index count copy.
//     Mutating methods (append, pop, update...) fail as in the immutable sandbox.
//   - Filters: abs attr batch capitalize center count d default dictsort e escape first
//     float forceescape format groupby indent int items join last length list lower
//     map max min reject rejectattr replace reverse round safe select selectattr slice
//     sort string sum title tojson trim truncate unique upper wordcount.
//   - Tests: boolean callable defined divisibleby eq equalto escaped even false filter
//     float ge gt in integer iterable le lower lt mapping ne none number odd sameas
//     sequence string test true undefined upper (and ==, !=, <, <=, >, >=).
//   - Globals: range dict namespace joiner raise_exception strftime_now.
//
// Python's behaviour is followed where it shows in output or errors: generator filters
// (map, select, reject, selectattr, rejectattr, unique, batch, slice, items) return
// lazy one-shot iterators that are always true and have no length; dict views and
// range print as Python prints them; names resolve per Jinja2 frame (a loop body or
// macro running before its frame's unconditional set sees the name undefined); str %
// args, str.format, repr of floats and strings, floor division and ** are CPython's.
//
// Not supported: extends/include/import/block (a chat template has no loader), the
// filters filesizeformat pprint random striptags urlencode urlize wordwrap xmlattr
// (an unknown filter is an error at Parse, as in Jinja2), autoescaping, complex
// numbers, and ints beyond 64 bits (an overflow is an error, where Python would go on).
// Parse refuses templates nested more than 400 levels deep; a render stops with an
// error past 64 MiB of output, 1 MiB made by one repetition ("x" * n), 200 nested
// macro calls, or 2^20 loop iterations and macro calls; range() is capped at 100000
// items as in Jinja2's sandbox.
//
// Values from Go: maps become dicts with sorted keys (a Go map has no order), so pass
// json.RawMessage, *Dict or DecodeJSON results where key order shows in the output
// (tool schemas rendered with tojson). Integral JSON numbers stay ints only when
// decoded that way; a float64 1 renders as "1.0", as Python's float would.
package template
