// Command gorender renders templates with text/template for scripts/tmplref/fuzzdiff.py:
// it reads a JSON array of {"name", "template", "vars"} on stdin and writes a JSON array
// of {"name", "output"} or {"name", "error"} to stdout.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/mlxg/mlxg/text/template"
)

type job struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
}

type result struct {
	Name   string  `json:"name"`
	Output *string `json:"output,omitempty"`
	Error  string  `json:"error,omitempty"`
}

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gorender:", err)
		os.Exit(1)
	}
	var jobs []job
	if err := json.Unmarshal(data, &jobs); err != nil {
		fmt.Fprintln(os.Stderr, "gorender: stdin must be a JSON array of {name, template, vars}:", err)
		os.Exit(1)
	}
	results := make([]result, 0, len(jobs))
	for _, j := range jobs {
		results = append(results, run(j))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "gorender:", err)
		os.Exit(1)
	}
}

func run(j job) result {
	res := result{Name: j.Name}
	vars := map[string]any{}
	if len(j.Vars) > 0 {
		v, err := template.DecodeJSON(j.Vars)
		if err != nil {
			res.Error = err.Error()
			return res
		}
		d, ok := v.(*template.Dict)
		if !ok {
			res.Error = "vars must be a JSON object"
			return res
		}
		for _, k := range d.Keys() {
			vars[k], _ = d.Get(k)
		}
	}
	t, err := template.Parse(j.Name, j.Template)
	if err == nil {
		var out string
		if out, err = t.Render(vars); err == nil {
			res.Output = &out
		}
	}
	if err != nil {
		res.Error = err.Error()
	}
	return res
}
