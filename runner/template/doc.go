// Package template renders Hugging Face chat templates byte for byte as transformers
// does: Jinja2 in an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks
// on, keep_trailing_newline off, the loopcontrols extension, transformers' tojson,
// raise_exception and strftime_now, and the {% generation %} tag.
//
// The engine is written here rather than taken from gonja/v2. gonja's gaps are in
// exactly the places chat templates live (tojson's separators and key order, a
// parenthesised inline if, str methods called with default arguments), and each fix
// would be a patch against another engine's value model; chat templates also depend
// on Python's semantics throughout (str(None) == "None", 1 == 1.0, Undefined that
// prints as "" but fails on attribute access, per-iteration loop scopes, insertion-
// ordered dicts). A focused engine that models those values directly is smaller than
// gonja plus its patches, and is checked against Jinja2 itself (testdata/).
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
// Not supported: extends/include/import/block (a chat template has no loader), the
// filters filesizeformat pprint random striptags urlencode urlize wordwrap xmlattr
// (an unknown filter is an error at Parse, as in Jinja2), autoescaping, and Python
// ints beyond 64 bits.
//
// Values from Go: maps become dicts with sorted keys (a Go map has no order), so pass
// json.RawMessage, *Dict or DecodeJSON results where key order shows in the output
// (tool schemas rendered with tojson). Integral JSON numbers stay ints only when
// decoded that way; a float64 1 renders as "1.0", as Python's float would.
package template
