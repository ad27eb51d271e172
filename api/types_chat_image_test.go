package api

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestImageDataJSON: base64 (padded or not, or as a data URL) decodes; anything else is an
// error that says what is wrong; images marshal back as base64.
func TestImageDataJSON(t *testing.T) {
	for _, in := range []string{`"aGk="`, `"aGk"`, `"data:image/png;base64,aGk="`} {
		var d ImageData
		if err := json.Unmarshal([]byte(in), &d); err != nil || string(d) != "hi" {
			t.Errorf("%s: %q %v", in, d, err)
		}
	}
	for in, want := range map[string]string{`"@@@"`: "not valid base64", `7`: "must be a base64 string"} {
		var d ImageData
		if err := json.Unmarshal([]byte(in), &d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	b, _ := json.Marshal(Message{Role: "user", Images: []ImageData{ImageData("hi")}, ImageAt: []int{0}})
	if string(b) != `{"role":"user","content":"","images":["aGk="]}` {
		t.Errorf("marshalled %s", b)
	}
}
