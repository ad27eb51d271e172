package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

const cityFormat = `{"type":"object","properties":{"city":{"enum":["Paris","Rome"]},"sunny":{"type":"boolean"}},"required":["city","sunny"],"additionalProperties":false}`

func checkCityJSON(t *testing.T, where, text string) {
	t.Helper()
	var v struct {
		City  string
		Sunny *bool
	}
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil || (v.City != "Paris" && v.City != "Rome") || v.Sunny == nil {
		t.Fatalf("%s: %q does not match the schema (%v)", where, text, err)
	}
}

// TestRunFormat: mlxg run --format constrains the answer through the server (thinking shown as it
// comes, then JSON), and in-process on a checkpoint directory; a bad --format is an error.
func TestRunFormat(t *testing.T) {
	scriptedStore(t)
	out, errs, err := runClient(t, "", "scripted", "Weather?", "--format", cityFormat)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	head := "Thinking...\n" + apitest.ToolThinking + "\n...done thinking.\n\n"
	if !strings.HasPrefix(out, head) {
		t.Fatalf("output %q", out)
	}
	checkCityJSON(t, "run --format", strings.TrimPrefix(out, head))
	out, errs, err = runClient(t, "", "scripted", "Weather?", "--think=false", "--format", cityFormat)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	checkCityJSON(t, "run --think=false --format", out)
	if _, _, err := runClient(t, "", "scripted", "hi", "--format", "yaml"); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Fatalf("bad --format: %v", err)
	}
	if _, _, err := runClient(t, "", "scripted", "hi", "--format", `{"type":"integer","multipleOf":2}`); err == nil || !strings.Contains(err.Error(), "multipleOf") {
		t.Fatalf("unsupported keyword: %v", err)
	}

	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // no server
	dir := testdata.SharedModel(t, "qwen3-tiny")
	out, errs, err = runCLI(t, "run", dir, "--think=false", "--format", cityFormat, "-o", "temperature=0", "-o", "num_predict=60", "Weather?")
	if err != nil {
		t.Fatalf("directory: %v\n%s", err, errs)
	}
	checkCityJSON(t, "run DIR --format", out)
}
