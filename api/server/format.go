package server

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/text/constrain"
)

// oaiFormat turns OpenAI's response_format into Ollama's format: nothing for "text", "json"
// for json_object, the schema of json_schema. A json_schema without a schema, or an unknown
// type, is a 400.
func oaiFormat(rf *openai.ResponseFormat) (json.RawMessage, error) {
	if rf == nil {
		return nil, nil
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`"json"`), nil
	case "json_schema":
		if len(bytes.TrimSpace(rf.JSONSchema)) == 0 {
			return nil, errorf(http.StatusBadRequest, "response_format: type json_schema needs a json_schema object ({\"name\": ..., \"schema\": {...}})")
		}
		if _, err := constrain.FromOpenAIJSONSchema(rf.JSONSchema); err != nil {
			return nil, errorf(http.StatusBadRequest, "response_format: %v", err)
		}
		var js struct {
			Schema json.RawMessage `json:"schema"`
		}
		_ = json.Unmarshal(rf.JSONSchema, &js) // FromOpenAIJSONSchema read it
		return js.Schema, nil
	}
	return nil, errorf(http.StatusBadRequest, "response_format: type %q is not supported (text, json_object or json_schema)", rf.Type)
}
