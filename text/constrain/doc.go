// Package constrain is constrained decoding for structured outputs: it keeps a model's
// output a valid prefix of a JSON value that matches a JSON schema, one token at a time.
// It knows nothing of models, engines or servers: a caller compiles a schema (Compile,
// or FromFormat and FromOpenAIJSONSchema for Ollama's and OpenAI's request fields),
// builds a Vocab once per tokenizer from each token's bytes, and for each generation
// starts a Constraint that masks logits (Apply) and follows the chosen tokens (Accept).
//
// A schema compiles to a graph of nodes; a Constraint walks that graph with a pushdown
// automaton over bytes (machine.go), a set of stacks of frames, one frame per open
// object, array, string, number or literal. The tokens of a vocabulary are kept in a
// byte trie; the mask of the tokens allowed in a state comes from walking the trie with
// the automaton, pruning every subtree whose prefix the automaton rejects, and is cached
// per state. Inside a string without a pattern or length limit, the tokens that are
// plain string text (complete UTF-8, no quote, backslash or control byte) leave the
// state as it is, so they are allowed as one precomputed set and only the other tokens
// are walked.
//
// Whitespace between JSON tokens is one space, or a newline and up to 32 spaces or tabs
// (before the value, up to 32 whitespace bytes of any kind); object keys come in the
// schema's order (optional ones may be left out), and only the properties the schema
// names are generated, so the output is valid against the schema whatever
// additionalProperties says.
//
// Supported (Supported lists the keywords, for error messages): type (one or a list),
// enum, const, properties, required, additionalProperties, items, minItems, maxItems,
// minLength, maxLength, pattern (the part of ECMA-262 regular expressions that Go's RE2
// syntax shares, compiled to a DFA over printable ASCII and JSON's short escapes),
// format (date, time, date-time, uuid, enforced by patterns), minimum, maximum and their
// exclusive forms, nullable, anyOf, allOf of one schema, oneOf whose alternatives are
// told apart by type or by a const or enum property, and $ref to a JSON pointer inside the
// schema (#/$defs/Name, #/definitions/Name, #), recursion included.
// Annotations (title, description, default, examples...) are accepted and ignored.
//
// Not supported, each refused by Compile with a *SchemaError naming the keyword rather
// than silently not enforced: any other keyword (patternProperties, if/then/else,
// dependentSchemas, uniqueItems, multipleOf, contains, ...), lookaround, backreferences
// and word boundaries in patterns, a pattern together with a format, keywords beside
// $ref, references outside the schema or to anchors, allOf of several schemas, and
// schemas that refer to themselves without an object or array in between. A pattern string holds printable ASCII only; a number
// under minimum or maximum is written without an exponent.
package constrain
