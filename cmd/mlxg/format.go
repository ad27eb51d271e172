package main

import (
	"encoding/json"
	"fmt"
	"strings"
)

// formatArg reads run's --format: "json" (any JSON object) or a JSON schema object, as Ollama's format
// field takes them; "" is no format.
func formatArg(s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil, nil
	case s == "json":
		return json.RawMessage(`"json"`), nil
	case strings.HasPrefix(s, "{") && json.Valid([]byte(s)):
		return json.RawMessage(s), nil
	}
	return nil, fmt.Errorf("--format is %q: give json, or a JSON schema object such as '{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}}}'", s)
}
