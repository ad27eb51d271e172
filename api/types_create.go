package api

// Wire types of Ollama's /api/create, as the ollama CLI (`ollama create -f Modelfile`) and Ollama's Go,
// Python and JavaScript clients send it: the Modelfile already parsed into fields, local files uploaded
// first as blobs (/api/blobs/:digest) and named in Files.

// CreateRequest is the body of POST /api/create. mlxg supports Model, Stream, From, Files, Quantize,
// System, Parameters, Messages and License; Template and Adapters get a 400 (mlxg renders the
// checkpoint's own chat template and has no LoRA), and so do the draft-model, remote and renderer fields.
type CreateRequest struct {
	Model    string `json:"model"`
	Stream   *bool  `json:"stream,omitempty"`
	Quantize string `json:"quantize,omitempty"`

	From     string            `json:"from,omitempty"`
	Files    map[string]string `json:"files,omitempty"` // file name -> "sha256:<hex>" of an uploaded blob
	Adapters map[string]string `json:"adapters,omitempty"`
	Template string            `json:"template,omitempty"`
	// License is a string or a list of strings.
	License    any            `json:"license,omitempty"`
	System     string         `json:"system,omitempty"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Messages   []Message      `json:"messages,omitempty"`

	// Refused with a 400 when set: mlxg has no draft models, remote models or named renderers.
	DraftQuantize string            `json:"draft_quantize,omitempty"`
	DraftFiles    map[string]string `json:"draft_files,omitempty"`
	RemoteHost    string            `json:"remote_host,omitempty"`
	Renderer      string            `json:"renderer,omitempty"`
	Parser        string            `json:"parser,omitempty"`
	// Requires is the least Ollama version the model needs; one above OllamaVersion is refused.
	Requires string `json:"requires,omitempty"`

	// Name is deprecated, see Model
	Name string `json:"name"`
	// Quantization is deprecated, see Quantize
	Quantization string `json:"quantization,omitempty"`
}
