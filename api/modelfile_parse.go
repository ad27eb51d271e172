package api

// Reading a Modelfile (`mlxg create NAME -f Modelfile`) into the CreateRequest that /api/create takes, as
// the ollama CLI does: FROM a model name, or FROM a local file or folder whose files are uploaded as blobs
// first (Upload), PARAMETER, SYSTEM, MESSAGE, LICENSE, and the lines mlxg refuses (TEMPLATE, ADAPTER, ...)
// passed on for the server to refuse with its message.

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Upload is a local file a Modelfile's FROM names: it goes to /api/blobs/<Digest> before the create.
type Upload struct {
	Path   string
	Digest string // sha256:<hex>
}

// ParseModelfile reads a Modelfile; dir is the folder relative FROM paths start from (the Modelfile's).
// FROM a path that exists is sent as files (each a blob to upload); FROM anything else is a model name.
func ParseModelfile(r io.Reader, dir string) (*CreateRequest, []Upload, error) {
	req := &CreateRequest{}
	var uploads []Upload
	var licenses []any
	lines, err := modelfileCommands(r)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range lines {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("Modelfile line %d: %s %s", c.line, strings.ToUpper(c.name), fmt.Sprintf(format, args...))
		}
		switch c.name {
		case "from":
			path := c.args
			if strings.HasPrefix(path, "~/") {
				if home, err := os.UserHomeDir(); err == nil {
					path = filepath.Join(home, path[2:])
				}
			} else if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path)
			}
			if _, err := os.Stat(path); err != nil { // not a file here: a model name
				req.From = c.args
				continue
			}
			if uploads, err = checkpointFiles(path); err != nil {
				return nil, nil, bad("%v", err)
			}
			req.Files = map[string]string{}
			for _, u := range uploads {
				req.Files[filepath.Base(u.Path)] = u.Digest
			}
		case "parameter":
			name, value := cutSpace(c.args)
			name = strings.ToLower(name)
			v, err := parameterValue(name, unquoteArg(strings.TrimSpace(value)))
			if err != nil {
				return nil, nil, bad("%v", err)
			}
			if req.Parameters == nil {
				req.Parameters = map[string]any{}
			}
			if list, ok := v.([]string); ok { // stop: each line adds one
				prev, _ := req.Parameters[name].([]string)
				v = append(prev, list...)
			}
			req.Parameters[name] = v
		case "system":
			req.System = c.args
		case "template":
			req.Template = c.args
		case "license":
			licenses = append(licenses, c.args)
		case "message":
			role, content := cutSpace(c.args)
			if content == "" || !slices.Contains([]string{"system", "user", "assistant"}, strings.ToLower(role)) {
				return nil, nil, bad("needs a role (system, user or assistant) and the message, as in MESSAGE user Hello")
			}
			req.Messages = append(req.Messages, Message{Role: strings.ToLower(role), Content: unquoteArg(strings.TrimSpace(content))})
		case "adapter":
			req.Adapters = map[string]string{c.args: ""}
		case "requires":
			req.Requires = c.args
		case "renderer":
			req.Renderer = c.args
		case "parser":
			req.Parser = c.args
		case "draft":
			req.DraftFiles = map[string]string{c.args: ""}
		default:
			return nil, nil, fmt.Errorf("Modelfile line %d: unknown instruction %q (FROM, PARAMETER, SYSTEM, MESSAGE, LICENSE, TEMPLATE, ADAPTER)", c.line, c.name)
		}
	}
	if req.From == "" && len(req.Files) == 0 {
		return nil, nil, fmt.Errorf("the Modelfile has no FROM line: name the model (or the checkpoint folder) it starts from")
	}
	if len(licenses) > 0 {
		req.License = licenses
	}
	return req, uploads, nil
}

type modelfileCommand struct {
	line       int
	name, args string
}

// modelfileCommands splits a Modelfile into instructions: "NAME args" per line, '#' comments, and
// arguments in """triple quotes""" that may span lines (or "quotes" on one line).
func modelfileCommands(r io.Reader) ([]modelfileCommand, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []modelfileCommand
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, args := cutSpace(line)
		c := modelfileCommand{line: n, name: strings.ToLower(name), args: strings.TrimSpace(args)}
		if c.name == "message" || c.name == "parameter" { // "role content" / "name value": the quotes are on the second word
			first, rest := cutSpace(c.args)
			rest, err := readQuoted(strings.TrimSpace(rest), sc, &n)
			if err != nil {
				return nil, fmt.Errorf("Modelfile line %d: %w", c.line, err)
			}
			c.args = first + " " + rest
		} else {
			var err error
			if c.args, err = readQuoted(c.args, sc, &n); err != nil {
				return nil, fmt.Errorf("Modelfile line %d: %w", c.line, err)
			}
			c.args = unquoteArg(c.args)
		}
		if strings.TrimSpace(c.args) == "" {
			return nil, fmt.Errorf("Modelfile line %d: %s needs an argument", c.line, strings.ToUpper(c.name))
		}
		out = append(out, c)
	}
	return out, sc.Err()
}

// cutSpace splits s at its first run of spaces or tabs.
func cutSpace(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimLeft(s[i:], " \t")
}

// readQuoted completes an argument that opens triple quotes with the following lines up to the closing
// ones, and returns it without them; other arguments come back as they are.
func readQuoted(arg string, sc *bufio.Scanner, n *int) (string, error) {
	if !strings.HasPrefix(arg, `"""`) {
		return arg, nil
	}
	body := arg[3:]
	for !strings.Contains(body, `"""`) {
		if !sc.Scan() {
			return "", fmt.Errorf(`unterminated """ (close it with """)`)
		}
		*n++
		body += "\n" + sc.Text()
	}
	i := strings.Index(body, `"""`)
	if rest := strings.TrimSpace(body[i+3:]); rest != "" {
		return "", fmt.Errorf(`text %q after the closing """`, rest)
	}
	return body[:i], nil
}

// unquoteArg drops one pair of surrounding double quotes.
func unquoteArg(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' && !strings.HasPrefix(s, `"""`) {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
		return s[1 : len(s)-1]
	}
	return s
}

// DraftModelParameter is the PARAMETER naming a model's draft model (a model in the local
// store with the same tokenizer) for speculative decoding. It is no request option: the
// draft loads with the model.
const DraftModelParameter = "draft_model"

// parameterValue types a PARAMETER value by the option it sets (Options' field of that JSON name).
func parameterValue(name, value string) (any, error) {
	if value == "" {
		return nil, fmt.Errorf("%s needs a value", name)
	}
	if name == DraftModelParameter {
		return value, nil
	}
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Options]()) {
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != name || f.Anonymous {
			continue
		}
		kind := f.Type.Kind()
		if kind == reflect.Pointer {
			kind = f.Type.Elem().Kind()
		}
		switch kind {
		case reflect.Int:
			n, err := strconv.Atoi(value)
			if err != nil {
				return nil, fmt.Errorf("%s %q: want an integer", name, value)
			}
			return n, nil
		case reflect.Float32:
			x, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return nil, fmt.Errorf("%s %q: want a number", name, value)
			}
			return x, nil
		case reflect.Bool:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return nil, fmt.Errorf("%s %q: want true or false", name, value)
			}
			return b, nil
		case reflect.Slice:
			return []string{value}, nil
		}
	}
	return nil, fmt.Errorf("%s: unknown parameter (use Ollama's option names: num_ctx, temperature, top_k, top_p, min_p, stop, seed, num_predict, repeat_penalty, ...)", name)
}

// checkpointFiles lists what FROM a local path uploads: a folder's safetensors, JSON, chat template and
// tokenizer files (with their sha256), or one file.
func checkpointFiles(path string) ([]Upload, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var paths []string
	if !fi.IsDir() {
		paths = []string{path}
	} else {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		weights := false
		for _, e := range ents {
			n := e.Name()
			keep := strings.HasSuffix(n, ".safetensors") || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".jinja") || n == "tokenizer.model"
			if e.IsDir() || strings.HasPrefix(n, ".") || !keep {
				continue
			}
			weights = weights || strings.HasSuffix(n, ".safetensors")
			paths = append(paths, filepath.Join(path, n))
		}
		if !weights {
			return nil, fmt.Errorf("%s has no *.safetensors files: mlxg creates models from safetensors checkpoints (config.json and *.safetensors)", path)
		}
	}
	var out []Upload
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		out = append(out, Upload{Path: p, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil))})
	}
	return out, nil
}
