package openai

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestMessageText(t *testing.T) {
	for in, want := range map[string]string{
		`"hello"`: "hello",
		`null`:    "",
		`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`: "ab",
	} {
		got, err := Message{Content: json.RawMessage(in)}.Text()
		if err != nil || got != want {
			t.Errorf("%s: %q %v", in, got, err)
		}
	}
	for in, msg := range map[string]string{
		`[{"type":"image_url","image_url":{"url":"x"}}]`:                          "must be a data URL",
		`[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]`:  "not fetched",
		`[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}}]`: "not supported here",
		`[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@"}}]`:   "not valid base64",
		`[{"type":"image_url","image_url":{"url":"data:image/png,aGk="}}]`:        "must be base64",
		`[{"type":"image_url"}]`: "needs an image_url",
		`[{"type":"audio"}]`:     `unsupported content part type "audio"`,
		`42`:                     "string or a list",
	} {
		if _, err := (Message{Content: json.RawMessage(in)}).Text(); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", in, err, msg)
		}
	}
}

func TestStopsAndInputs(t *testing.T) {
	if s, err := Stops(json.RawMessage(`"\n"`)); err != nil || !slices.Equal(s, []string{"\n"}) {
		t.Fatal(s, err)
	}
	if s, err := Stops(json.RawMessage(`["a","b"]`)); err != nil || !slices.Equal(s, []string{"a", "b"}) {
		t.Fatal(s, err)
	}
	if _, err := Stops(json.RawMessage(`[1]`)); err == nil {
		t.Fatal("stop [1] accepted")
	}
	if in, err := Inputs(json.RawMessage(`"x"`)); err != nil || !slices.Equal(in, []string{"x"}) {
		t.Fatal(in, err)
	}
	for _, bad := range []string{`[]`, `[[1,2]]`, `[1]`, `{}`} {
		if _, err := Inputs(json.RawMessage(bad)); err == nil {
			t.Errorf("input %s accepted", bad)
		}
	}
}

func TestNewError(t *testing.T) {
	for status, typ := range map[int]string{400: "invalid_request_error", 413: "invalid_request_error", 404: "not_found_error",
		503: "server_overloaded", 500: "api_error"} {
		if got := NewError(status, "m").Error.Type; got != typ {
			t.Errorf("%d: %s, want %s", status, got, typ)
		}
	}
	b, _ := json.Marshal(NewError(400, "bad"))
	if string(b) != `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":null}}` {
		t.Fatalf("%s", b)
	}
}

// TestMessageTextImages: images come back with their bytes and the offset in the text where they stood.
func TestMessageTextImages(t *testing.T) {
	m := Message{Content: json.RawMessage(`[{"type":"text","text":"ab"},{"type":"image_url","image_url":{"url":"data:image/png;base64,aGk="}},{"type":"text","text":"cd"},{"type":"input_image","image_url":"data:image/jpeg;base64,aGk"}]`)}
	text, images, err := m.TextImages()
	if err != nil || text != "abcd" || len(images) != 2 || string(images[0].Data) != "hi" || images[0].At != 2 || images[1].At != 4 || string(images[1].Data) != "hi" {
		t.Fatalf("%q %+v %v", text, images, err)
	}
	text, images, err = PartsImages(json.RawMessage(`[{"type":"input_image","image_url":"data:image/png;base64,aGk="},{"type":"input_text","text":"x"}]`))
	if err != nil || text != "x" || len(images) != 1 || images[0].At != 0 {
		t.Fatalf("%q %+v %v", text, images, err)
	}
	for in, msg := range map[string]string{
		`[{"type":"input_image","file_id":"f"}]`:                "file_id is not supported",
		`[{"type":"input_image","image_url":"http://x/a.png"}]`: "not fetched",
		`[{"type":"input_file"}]`:                               "input_file is not supported",
	} {
		if _, _, err := PartsImages(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", in, err, msg)
		}
	}
}
