package constrain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// SchemaError is a schema that cannot be used: a keyword that is not supported, or a value
// that is not what the keyword takes. Servers answer it with 400.
type SchemaError struct {
	Path string // JSON pointer of the schema object, "#" for the root
	Msg  string
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("format: schema at %s: %s", e.Path, e.Msg)
}

type kind uint8

const (
	kAny     kind = iota // any JSON value
	kObject              // an object: props in order, or open (any keys) when props is empty and open
	kArray               // an array of items
	kString              // a string with optional length limits and pattern
	kNumber              // a number (integer when integer is set)
	kLiteral             // one of a set of literal JSON texts (enum, const, true/false, null)
	kUnion               // one of alts (anyOf, a list of types)
	kRef                 // the node ref ($ref)
)

type prop struct {
	name     string
	key      []byte // the key as JSON text, quotes included
	node     int32
	required bool
}

type node struct {
	kind kind
	// object
	props    []prop
	keyTrie  []int32 // per position i in props: the literal trie of the keys that may come next
	closable []bool  // per position i (len(props)+1): whether } may come (no required prop left)
	open     bool    // keys are any strings, values are extra
	extra    int32
	// array
	items              int32
	minItems, maxItems int32 // maxItems -1: no limit
	// string
	minLen, maxLen int32 // maxLen -1: no limit
	pattern        *dfa
	// number
	integer bool
	bounds  *numBounds // minimum/maximum; nil: none
	// literal
	lit   int32    // root of its trie
	words [][]byte // the literals
	// union
	alts []int32
	// ref
	ref int32
}

// Schema is a compiled schema; it is not changed after Compile, so Constraints made from it
// may run in different goroutines (each Constraint in one).
type Schema struct {
	nodes []node
	lits  []litNode
	root  int32
	// fixed nodes every schema has
	anyNode, anyObject, anyArray, anyString, anyNumber, anyScalarLit int32
	// gemma: the value is written in Gemma 4's notation, not JSON (Gemma4); gemmaCall: as
	// the name and arguments of a call (Gemma4Call)
	gemma, gemmaCall bool
}

// litNode is a node of a literal trie: the bytes of a set of literal texts.
type litNode struct {
	kids []litKid
	term int32 // the index of the literal that ends here, -1 when none
}

type litKid struct {
	b     byte
	child int32
}

func newSchema() *Schema {
	s := &Schema{}
	s.anyNode = s.add(node{kind: kAny})
	s.anyObject = s.add(node{kind: kObject, open: true, extra: s.anyNode})
	s.anyArray = s.add(node{kind: kArray, items: s.anyNode, maxItems: -1})
	s.anyString = s.add(node{kind: kString, maxLen: -1})
	s.anyNumber = s.add(node{kind: kNumber})
	s.anyScalarLit = s.literal([][]byte{[]byte("true"), []byte("false"), []byte("null")})
	return s
}

// literal adds a node for one of words (JSON texts).
func (s *Schema) literal(words [][]byte) int32 {
	return s.add(node{kind: kLiteral, lit: s.litTrie(words), words: words})
}

func (s *Schema) add(n node) int32 {
	s.nodes = append(s.nodes, n)
	return int32(len(s.nodes) - 1)
}

// litTrie builds the trie of words and returns its root. Word i ends at a node with term i;
// a word repeated keeps its first index.
func (s *Schema) litTrie(words [][]byte) int32 {
	root := int32(len(s.lits))
	s.lits = append(s.lits, litNode{term: -1})
	for i, w := range words {
		n := root
		for _, b := range w {
			next := int32(-1)
			for _, k := range s.lits[n].kids {
				if k.b == b {
					next = k.child
					break
				}
			}
			if next < 0 {
				next = int32(len(s.lits))
				s.lits = append(s.lits, litNode{term: -1})
				s.lits[n].kids = append(s.lits[n].kids, litKid{b, next})
			}
			n = next
		}
		if s.lits[n].term < 0 {
			s.lits[n].term = int32(i)
		}
	}
	return root
}

// JSONObject is format "json" (Ollama) and response_format json_object (OpenAI): any
// JSON object.
func JSONObject() *Schema {
	s := newSchema()
	s.root = s.anyObject
	return s
}

// FromFormat reads Ollama's format field: absent, null or "" is no constraint (nil),
// "json" any JSON object, an object a JSON schema.
func FromFormat(format json.RawMessage) (*Schema, error) {
	f := bytes.TrimSpace(format)
	if len(f) == 0 || string(f) == "null" || string(f) == `""` {
		return nil, nil
	}
	if f[0] == '"' {
		var name string
		if err := json.Unmarshal(f, &name); err != nil {
			return nil, fmt.Errorf("format: %v", err)
		}
		if name == "json" {
			return JSONObject(), nil
		}
		return nil, &SchemaError{Path: "#", Msg: fmt.Sprintf("format must be \"json\" or a JSON schema object, not %q", name)}
	}
	return Compile(f)
}

// FromOpenAIJSONSchema reads OpenAI's json_schema object ({"name", "schema", "strict",
// "description"}), as response_format's json_schema and the Responses API's text.format
// (type "json_schema", same fields beside type) carry it.
func FromOpenAIJSONSchema(obj json.RawMessage) (*Schema, error) {
	var js struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(obj, &js); err != nil {
		return nil, fmt.Errorf("json_schema: %v", err)
	}
	if len(bytes.TrimSpace(js.Schema)) == 0 || string(bytes.TrimSpace(js.Schema)) == "null" {
		return nil, &SchemaError{Path: "#", Msg: "json_schema.schema is missing: give the JSON schema of the answer"}
	}
	return Compile(js.Schema)
}

// annotations are keywords that do not constrain a value; they are accepted and ignored.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"discriminator": true, // OpenAPI's hint beside oneOf
	"$defs":         true, "definitions": true, "$anchor": true, "strict": true,
	"contentMediaType": true, "contentEncoding": true,
}

// Supported lists the schema keywords Compile accepts (for error messages and the docs).
var Supported = []string{"type", "enum", "const", "properties", "required", "additionalProperties",
	"items", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
	"exclusiveMinimum", "exclusiveMaximum", "nullable", "anyOf",
	"allOf (one schema)", "oneOf (alternatives told apart by type or a const/enum property)", "$ref", "$defs", "definitions"}

// Compile compiles a JSON schema. Keywords it cannot enforce are a *SchemaError naming them.
func Compile(schema json.RawMessage) (*Schema, error) {
	c := &compiler{s: newSchema(), byPath: map[string]int32{}, order: map[uintptr][]string{}}
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	doc, err := c.decode(dec)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("text after the schema")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("format: the schema is not JSON: %v", err)
	}
	c.doc = doc
	root, err := c.compile(doc, "#")
	if err != nil {
		return nil, err
	}
	c.s.root = root
	if err := c.checkCycles(); err != nil {
		return nil, err
	}
	return c.s, nil
}

type compiler struct {
	s      *Schema
	doc    any
	byPath map[string]int32     // $ref targets compiled so far (or being compiled)
	order  map[uintptr][]string // the keys of each decoded object, in the document's order
}

// decode reads one JSON value like json.Decoder.Decode into any (numbers as json.Number),
// and records the order of every object's keys: properties are generated in that order.
func (c *compiler) decode(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := c.decode(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := m[k]; !dup {
					keys = append(keys, k)
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			c.order[reflect.ValueOf(m).Pointer()] = keys
			return m, nil
		case '[':
			list := []any{}
			for dec.More() {
				v, err := c.decode(dec)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return list, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return tok, nil
}

func (c *compiler) errf(path, format string, args ...any) error {
	return &SchemaError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// keys returns the keys of a decoded object in the document's order.
func (c *compiler) keys(obj map[string]any) []string {
	if obj == nil {
		return nil
	}
	if k, ok := c.order[reflect.ValueOf(obj).Pointer()]; ok {
		return k
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (c *compiler) compile(v any, path string) (int32, error) {
	switch v := v.(type) {
	case bool:
		if v {
			return c.s.anyNode, nil
		}
		return 0, c.errf(path, "the schema false allows no value")
	case map[string]any:
		return c.object(v, path)
	}
	return 0, c.errf(path, "a schema must be an object or a boolean, not %s", jsonType(v))
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

var typeNames = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

func (c *compiler) object(m map[string]any, path string) (int32, error) {
	var unsupported []string
	for k := range m {
		switch k {
		case "type", "enum", "const", "properties", "required", "additionalProperties", "items",
			"minItems", "maxItems", "minLength", "maxLength", "pattern", "format", "anyOf", "allOf", "$ref",
			"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "oneOf", "nullable":
		default:
			if !annotations[k] {
				unsupported = append(unsupported, k)
			}
		}
	}
	if len(unsupported) > 0 {
		sort.Strings(unsupported)
		return 0, c.errf(path, "unsupported keyword(s) %s; supported: %s", strings.Join(unsupported, ", "), strings.Join(Supported, ", "))
	}
	if ref, ok := m["$ref"]; ok {
		for k := range m {
			if k != "$ref" && !annotations[k] {
				return 0, c.errf(path, "$ref with the sibling keyword %q is not supported: move %q into the referenced schema", k, k)
			}
		}
		r, ok := ref.(string)
		if !ok {
			return 0, c.errf(path, "$ref must be a string")
		}
		return c.ref(r, path)
	}
	if all, ok := m["allOf"]; ok {
		list, ok := all.([]any)
		if !ok || len(list) != 1 {
			return 0, c.errf(path, "allOf is supported with exactly one schema (as pydantic writes a $ref with a description)")
		}
		rest := map[string]any{}
		for k, v := range m {
			if k != "allOf" && !annotations[k] {
				rest[k] = v
			}
		}
		if len(rest) > 0 {
			return 0, c.errf(path, "allOf beside other constraining keywords is not supported")
		}
		return c.compile(list[0], path+"/allOf/0")
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		v, ok := m[kw]
		if !ok {
			continue
		}
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return 0, c.errf(path, "%s must be a non-empty array of schemas", kw)
		}
		for k := range m {
			if k != kw && !annotations[k] {
				return 0, c.errf(path, "%s beside the keyword %q is not supported: put %q in each alternative", kw, k, k)
			}
		}
		var alts []int32
		for i, sub := range list {
			n, err := c.compile(sub, fmt.Sprintf("%s/%s/%d", path, kw, i))
			if err != nil {
				return 0, err
			}
			alts = append(alts, n)
		}
		if kw == "oneOf" {
			// Generated as anyOf, which is only right when no value matches two alternatives.
			for i := range alts {
				for j := i + 1; j < len(alts); j++ {
					if !c.s.disjoint(alts[i], alts[j]) {
						return 0, c.errf(path, "oneOf alternatives %d and %d may both match one value, which oneOf forbids: "+
							"use anyOf, or tell them apart by type or by a required property with different const/enum values", i, j)
					}
				}
			}
		}
		if len(alts) == 1 {
			return alts[0], nil
		}
		return c.s.add(node{kind: kUnion, alts: alts}), nil
	}

	// The types allowed: "type", else what the keywords imply, else any.
	var types []string
	if t, ok := m["type"]; ok {
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				s, ok := x.(string)
				if !ok {
					return 0, c.errf(path, "type must be a string or an array of strings")
				}
				types = append(types, s)
			}
		default:
			return 0, c.errf(path, "type must be a string or an array of strings")
		}
		if len(types) == 0 {
			return 0, c.errf(path, "type is an empty array: no value can match")
		}
		for _, t := range types {
			if !slices.Contains(typeNames, t) {
				return 0, c.errf(path, "unknown type %q (one of %s)", t, strings.Join(typeNames, ", "))
			}
		}
	}
	// OpenAPI 3.0's nullable: null is allowed beside the type.
	if v, ok := m["nullable"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return 0, c.errf(path, "nullable must be a boolean")
		}
		if b && types != nil && !slices.Contains(types, "null") {
			types = append(types, "null")
		}
	}

	if _, hasEnum := m["enum"]; hasEnum || m["const"] != nil || hasKey(m, "const") {
		return c.literal(m, types, path)
	}

	if types == nil {
		switch {
		case hasKey(m, "properties") || hasKey(m, "required") || hasKey(m, "additionalProperties"):
			types = []string{"object"}
		case hasKey(m, "items") || hasKey(m, "minItems") || hasKey(m, "maxItems"):
			types = []string{"array"}
		case hasKey(m, "minLength") || hasKey(m, "maxLength") || hasKey(m, "pattern") || hasKey(m, "format"):
			types = []string{"string"}
		case hasKey(m, "minimum") || hasKey(m, "maximum") || hasKey(m, "exclusiveMinimum") || hasKey(m, "exclusiveMaximum"):
			types = []string{"number"}
		default:
			return c.s.anyNode, nil
		}
	}
	// Keywords of one type given for another are ignored by JSON Schema; only check that
	// each keyword's own type is among the types.
	var alts []int32
	for _, t := range types {
		var n int32
		var err error
		switch t {
		case "object":
			n, err = c.objectNode(m, path)
		case "array":
			n, err = c.arrayNode(m, path)
		case "string":
			n, err = c.stringNode(m, path)
		case "number", "integer":
			if slices.Contains(types, "number") && t == "integer" {
				continue // number covers integer
			}
			b, err := c.compileBounds(m, t == "integer", path)
			if err != nil {
				return 0, err
			}
			n = c.s.add(node{kind: kNumber, integer: t == "integer", bounds: b})
		case "boolean":
			n = c.s.literal([][]byte{[]byte("true"), []byte("false")})
		case "null":
			n = c.s.literal([][]byte{[]byte("null")})
		}
		if err != nil {
			return 0, err
		}
		alts = append(alts, n)
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return c.s.add(node{kind: kUnion, alts: alts}), nil
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

// literal compiles enum/const: the values (that match type, when given) as compact JSON.
func (c *compiler) literal(m map[string]any, types []string, path string) (int32, error) {
	for k := range m {
		switch k {
		case "enum", "const", "type", "nullable":
		default:
			if !annotations[k] {
				return 0, c.errf(path, "enum/const beside the keyword %q is not supported", k)
			}
		}
	}
	var values []any
	if e, ok := m["enum"]; ok {
		list, ok := e.([]any)
		if !ok || len(list) == 0 {
			return 0, c.errf(path, "enum must be a non-empty array")
		}
		values = list
	}
	if cv, ok := m["const"]; ok {
		if values != nil {
			found := false
			for _, v := range values {
				if jsonEqual(v, cv) {
					found = true
				}
			}
			if !found {
				return 0, c.errf(path, "const is not among the enum values: no value can match")
			}
		}
		values = []any{cv}
	}
	var words [][]byte
	for _, v := range values {
		if types != nil && !slices.ContainsFunc(types, func(t string) bool { return typeMatches(t, v) }) {
			continue
		}
		b, err := marshalCompact(v)
		if err != nil {
			return 0, c.errf(path, "enum value: %v", err)
		}
		words = append(words, b)
	}
	if len(words) == 0 {
		return 0, c.errf(path, "no enum/const value has the type %s: no value can match", strings.Join(types, " or "))
	}
	return c.s.literal(words), nil
}

func typeMatches(t string, v any) bool {
	switch v := v.(type) {
	case nil:
		return t == "null"
	case bool:
		return t == "boolean"
	case string:
		return t == "string"
	case json.Number:
		if t == "number" {
			return true
		}
		if t == "integer" {
			f, err := strconv.ParseFloat(string(v), 64)
			return err == nil && f == float64(int64(f))
		}
	case []any:
		return t == "array"
	case map[string]any:
		return t == "object"
	}
	return false
}

func jsonEqual(a, b any) bool {
	x, err1 := marshalCompact(a)
	y, err2 := marshalCompact(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// marshalCompact writes v as compact JSON without HTML escaping (maps in sorted key order).
func marshalCompact(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func (c *compiler) count(m map[string]any, k, path string, def int32) (int32, error) {
	v, ok := m[k]
	if !ok {
		return def, nil
	}
	n, isNum := v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 32)
	if !isNum || err != nil || i < 0 {
		return 0, c.errf(path, "%s must be a non-negative integer", k)
	}
	return int32(i), nil
}

func (c *compiler) objectNode(m map[string]any, path string) (int32, error) {
	nd := node{kind: kObject, extra: c.s.anyNode}
	var props map[string]any
	if p, ok := m["properties"]; ok {
		if props, ok = p.(map[string]any); !ok {
			return 0, c.errf(path, "properties must be an object")
		}
	}
	required := map[string]bool{}
	if r, ok := m["required"]; ok {
		list, ok := r.([]any)
		if !ok {
			return 0, c.errf(path, "required must be an array of strings")
		}
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				return 0, c.errf(path, "required must be an array of strings")
			}
			required[s] = true
		}
	}
	closed := false
	extraSchema := any(true)
	if a, ok := m["additionalProperties"]; ok {
		if b, isBool := a.(bool); isBool && !b {
			closed = true
		} else {
			extraSchema = a
		}
	}
	names := c.keys(props)
	for _, name := range names {
		if b, ok := props[name].(bool); ok && !b { // the property must not be there
			if required[name] {
				return 0, c.errf(path, "property %q is required but its schema is false: no object can match", name)
			}
			continue
		}
		n, err := c.compile(props[name], path+"/properties/"+escapePointer(name))
		if err != nil {
			return 0, err
		}
		key, _ := marshalCompact(name)
		nd.props = append(nd.props, prop{name: name, key: key, node: n, required: required[name]})
	}
	// Required names the properties do not describe: generated with additionalProperties'
	// schema, which must allow them.
	var missing []string
	for r := range required {
		if props == nil || !hasKey(props, r) {
			missing = append(missing, r)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		if closed {
			return 0, c.errf(path, "required property %q is not in properties and additionalProperties is false: no object can match", name)
		}
		n, err := c.compile(extraSchema, path+"/additionalProperties")
		if err != nil {
			return 0, err
		}
		key, _ := marshalCompact(name)
		nd.props = append(nd.props, prop{name: name, key: key, node: n, required: true})
	}
	if len(nd.props) == 0 {
		if closed {
			// Only {} matches.
			nd.closable = []bool{true}
			nd.keyTrie = []int32{c.s.litTrie(nil)}
			return c.s.add(nd), nil
		}
		nd.open = true
		n, err := c.compile(extraSchema, path+"/additionalProperties")
		if err != nil {
			return 0, err
		}
		nd.extra = n
		return c.s.add(nd), nil
	}
	// Keys come in order; at position i, any key from i up to and including the first
	// required one may come next.
	np := len(nd.props)
	nd.closable = make([]bool, np+1)
	nd.closable[np] = true
	for i := np - 1; i >= 0; i-- {
		nd.closable[i] = nd.closable[i+1] && !nd.props[i].required
	}
	nd.keyTrie = make([]int32, np+1)
	for i := 0; i <= np; i++ {
		words := make([][]byte, np)
		for j := i; j < np; j++ {
			words[j] = nd.props[j].key
			if nd.props[j].required {
				break
			}
		}
		// Indices below i (and past the first required) are nil words: they would all end
		// at the root, so they are left out of the trie.
		var ws [][]byte
		var idx []int32
		for j, w := range words {
			if w != nil {
				ws = append(ws, w)
				idx = append(idx, int32(j))
			}
		}
		root := c.s.litTrie(ws)
		c.s.remapTerms(root, idx)
		nd.keyTrie[i] = root
	}
	return c.s.add(nd), nil
}

// remapTerms renumbers the word indices of the trie at root through idx.
func (s *Schema) remapTerms(root int32, idx []int32) {
	stack := []int32{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t := s.lits[n].term; t >= 0 {
			s.lits[n].term = idx[t]
		}
		for _, k := range s.lits[n].kids {
			stack = append(stack, k.child)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (c *compiler) arrayNode(m map[string]any, path string) (int32, error) {
	nd := node{kind: kArray, items: c.s.anyNode}
	var err error
	if nd.minItems, err = c.count(m, "minItems", path, 0); err != nil {
		return 0, err
	}
	if nd.maxItems, err = c.count(m, "maxItems", path, -1); err != nil {
		return 0, err
	}
	if nd.maxItems >= 0 && nd.minItems > nd.maxItems {
		return 0, c.errf(path, "minItems %d is more than maxItems %d: no array can match", nd.minItems, nd.maxItems)
	}
	if it, ok := m["items"]; ok {
		if _, isList := it.([]any); isList {
			return 0, c.errf(path, "items as an array (tuple validation) is not supported: give one schema for every item")
		}
		if b, isBool := it.(bool); isBool && !b {
			if nd.minItems > 0 {
				return 0, c.errf(path, "items is false but minItems is %d: no array can match", nd.minItems)
			}
			nd.maxItems = 0
		} else if nd.items, err = c.compile(it, path+"/items"); err != nil {
			return 0, err
		}
	}
	return c.s.add(nd), nil
}

// formats maps the string formats that are enforced to patterns that only match valid
// values (days stop at 28 so that every date exists).
var formats = map[string]string{
	"date":      `^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])$`,
	"time":      `^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"date-time": `^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`,
	"uuid":      `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`,
}

func (c *compiler) stringNode(m map[string]any, path string) (int32, error) {
	nd := node{kind: kString}
	var err error
	if nd.minLen, err = c.count(m, "minLength", path, 0); err != nil {
		return 0, err
	}
	if nd.maxLen, err = c.count(m, "maxLength", path, -1); err != nil {
		return 0, err
	}
	if nd.maxLen >= 0 && nd.minLen > nd.maxLen {
		return 0, c.errf(path, "minLength %d is more than maxLength %d: no string can match", nd.minLen, nd.maxLen)
	}
	pattern, hasPattern := m["pattern"]
	format, hasFormat := m["format"]
	if hasPattern && hasFormat {
		return 0, c.errf(path, "pattern and format together are not supported: keep one")
	}
	var re string
	switch {
	case hasPattern:
		s, ok := pattern.(string)
		if !ok {
			return 0, c.errf(path, "pattern must be a string")
		}
		re = s
	case hasFormat:
		s, ok := format.(string)
		if !ok {
			return 0, c.errf(path, "format must be a string")
		}
		if re, ok = formats[s]; !ok {
			names := make([]string, 0, len(formats))
			for k := range formats {
				names = append(names, k)
			}
			sort.Strings(names)
			return 0, c.errf(path, "string format %q is not supported (supported: %s)", s, strings.Join(names, ", "))
		}
	}
	if re != "" {
		d, err := compilePattern(re)
		if err != nil {
			return 0, c.errf(path, "pattern %q: %v", re, err)
		}
		if !d.satisfiable(nd.minLen, nd.maxLen) {
			return 0, c.errf(path, "no string of %s matches the pattern %q in printable ASCII", lengthRange(nd.minLen, nd.maxLen), re)
		}
		nd.pattern = d
	}
	return c.s.add(nd), nil
}

func lengthRange(lo, hi int32) string {
	if hi < 0 {
		return fmt.Sprintf("at least %d characters", lo)
	}
	return fmt.Sprintf("%d to %d characters", lo, hi)
}

func (c *compiler) ref(r, path string) (int32, error) {
	if !strings.HasPrefix(r, "#") {
		return 0, c.errf(path, "$ref %q: only references inside the schema (starting with #) are supported", r)
	}
	if n, ok := c.byPath[r]; ok {
		return n, nil
	}
	target, err := resolvePointer(c.doc, r)
	if err != nil {
		return 0, c.errf(path, "$ref %q: %v", r, err)
	}
	// Reserve the node first so that recursive references find it.
	idx := c.s.add(node{kind: kRef, ref: -1})
	c.byPath[r] = idx
	n, err := c.compile(target, r)
	if err != nil {
		return 0, err
	}
	c.s.nodes[idx].ref = n
	return idx, nil
}

func resolvePointer(doc any, ptr string) (any, error) {
	cur := doc
	rest := strings.TrimPrefix(ptr, "#")
	if rest == "" {
		return cur, nil
	}
	if !strings.HasPrefix(rest, "/") {
		return nil, fmt.Errorf("anchors are not supported: use a JSON pointer such as #/$defs/Name")
	}
	for _, tok := range strings.Split(rest[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[tok]
			if !ok {
				return nil, fmt.Errorf("%q not found", tok)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("index %q out of range", tok)
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q: not an object or array", tok)
		}
	}
	return cur, nil
}

// checkCycles rejects a schema with a reference or union that can never produce a value:
// one that only leads back to itself ({"$ref": "#"} at the root). A union that also has
// another alternative (D = string | D) is fine.
func (c *compiler) checkCycles() error {
	productive := make([]bool, len(c.s.nodes))
	for changed := true; changed; {
		changed = false
		for i := range c.s.nodes {
			if productive[i] {
				continue
			}
			nd := &c.s.nodes[i]
			ok := false
			switch nd.kind {
			case kRef:
				ok = productive[nd.ref]
			case kUnion:
				for _, a := range nd.alts {
					ok = ok || productive[a]
				}
			default:
				ok = true
			}
			if ok {
				productive[i], changed = true, true
			}
		}
	}
	for i := range c.s.nodes {
		if !productive[i] {
			return &SchemaError{Path: "#", Msg: "the schema refers to itself ($ref or anyOf) without an object or array in between: no value can match"}
		}
	}
	return nil
}

// JSON types, as bits.
const (
	tObject = 1 << iota
	tArray
	tString
	tNumber
	tBool
	tNull
)

// resolve follows references.
func (s *Schema) resolve(n int32) int32 {
	for i := 0; s.nodes[n].kind == kRef && i < len(s.nodes); i++ {
		n = s.nodes[n].ref
	}
	return n
}

// types are the JSON types node n's values may have.
func (s *Schema) types(n int32, seen map[int32]bool) int {
	n = s.resolve(n)
	if seen[n] {
		return 0
	}
	nd := &s.nodes[n]
	switch nd.kind {
	case kObject:
		return tObject
	case kArray:
		return tArray
	case kString:
		return tString
	case kNumber:
		return tNumber
	case kLiteral:
		t := 0
		for _, w := range nd.words {
			switch w[0] {
			case '{':
				t |= tObject
			case '[':
				t |= tArray
			case '"':
				t |= tString
			case 't', 'f':
				t |= tBool
			case 'n':
				t |= tNull
			default:
				t |= tNumber
			}
		}
		return t
	case kUnion:
		seen[n] = true
		t := 0
		for _, a := range nd.alts {
			t |= s.types(a, seen)
		}
		return t
	}
	return tObject | tArray | tString | tNumber | tBool | tNull
}

// disjoint reports whether no value can match both nodes, as far as it can be told: their types
// differ, they are literals with no value in common, or they are objects with a property both
// require whose literals differ (a discriminator).
func (s *Schema) disjoint(a, b int32) bool {
	if s.types(a, map[int32]bool{})&s.types(b, map[int32]bool{}) == 0 {
		return true
	}
	a, b = s.resolve(a), s.resolve(b)
	x, y := &s.nodes[a], &s.nodes[b]
	switch {
	case x.kind == kLiteral && y.kind == kLiteral:
		return literalsDisjoint(x.words, y.words)
	case x.kind == kObject && y.kind == kObject:
		for _, p := range x.props {
			if !p.required {
				continue
			}
			for _, q := range y.props {
				if q.required && q.name == p.name {
					pn, qn := &s.nodes[s.resolve(p.node)], &s.nodes[s.resolve(q.node)]
					if pn.kind == kLiteral && qn.kind == kLiteral && literalsDisjoint(pn.words, qn.words) {
						return true
					}
				}
			}
		}
	}
	return false
}

// literalsDisjoint reports whether two sets of literal texts have no JSON value in common:
// numbers compare by value; objects and arrays are not compared (they may be equal).
func literalsDisjoint(a, b [][]byte) bool {
	norm := func(w []byte) (string, bool) {
		switch w[0] {
		case '{', '[':
			return "", false
		case '"', 't', 'f', 'n':
			return string(w), true
		}
		r, ok := new(big.Rat).SetString(string(w))
		if !ok {
			return "", false
		}
		return "#" + r.RatString(), true
	}
	seen := map[string]bool{}
	for _, w := range a {
		k, ok := norm(w)
		if !ok {
			return false
		}
		seen[k] = true
	}
	for _, w := range b {
		k, ok := norm(w)
		if !ok || seen[k] {
			return false
		}
	}
	return true
}
