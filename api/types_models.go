package api

// Wire types of Ollama's model-management endpoints: /api/pull (NDJSON progress), /api/tags, /api/show,
// /api/delete, /api/copy and /api/version. Field names, JSON names and omitempty follow Ollama's
// api/types.go, so Ollama clients read them unchanged.

import (
	"fmt"
	"time"

	"github.com/mlxg/mlxg/registry"
)

// StatusError is an error answer of the server: its HTTP status and the body's "error".
type StatusError struct {
	StatusCode   int
	Status       string
	ErrorMessage string `json:"error"`
}

func (e StatusError) Error() string {
	switch {
	case e.Status != "" && e.ErrorMessage != "":
		return fmt.Sprintf("%s: %s", e.Status, e.ErrorMessage)
	case e.Status != "":
		return e.Status
	case e.ErrorMessage != "":
		return e.ErrorMessage
	}
	return "the mlxg server failed; see its log"
}

// PullRequest is the body of POST /api/pull.
type PullRequest struct {
	Model    string `json:"model"`
	Insecure bool   `json:"insecure,omitempty"`
	Username string `json:"username"`
	Password string `json:"password"`
	Stream   *bool  `json:"stream,omitempty"`

	// Name is deprecated, see Model
	Name string `json:"name"`
}

// ProgressResponse is one NDJSON line of /api/pull: registry.Progress, which has Ollama's fields
// (status, digest, total, completed), so the same events feed the CLI's bars and the stream.
type ProgressResponse = registry.Progress

// ListResponse is the body of GET /api/tags.
type ListResponse struct {
	Models []ListModelResponse `json:"models"`
}

// ListModelResponse is one model of ListResponse. Digest is the snapshot's commit.
type ListModelResponse struct {
	Name       string       `json:"name"`
	Model      string       `json:"model"`
	ModifiedAt time.Time    `json:"modified_at"`
	Size       int64        `json:"size"`
	Digest     string       `json:"digest"`
	Details    ModelDetails `json:"details,omitempty"`
}

// ModelDetails summarizes a model. Format is "safetensors"; Family is config.json's model_type;
// QuantizationLevel is e.g. "4bit", "mixed-4/8bit", "mxfp4" or, unquantized, the dtype ("BF16").
type ModelDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ShowRequest is the body of POST /api/show.
type ShowRequest struct {
	Model    string `json:"model"`
	System   string `json:"system"`
	Template string `json:"template"`
	Verbose  bool   `json:"verbose"`

	Options map[string]any `json:"options"`

	// Name is deprecated, see Model
	Name string `json:"name"`
}

// Tensor is one tensor of ShowResponse (verbose only).
type Tensor struct {
	Name  string   `json:"name"`
	Type  string   `json:"type"`
	Shape []uint64 `json:"shape"`
}

// ShowResponse is the body of /api/show's answer. ModelInfo uses GGUF-style keys
// ("general.architecture", "<family>.context_length", ...) plus mlxg's own ("mlx.quantization.bits", ...).
type ShowResponse struct {
	License      string         `json:"license,omitempty"`
	Modelfile    string         `json:"modelfile,omitempty"`
	Parameters   string         `json:"parameters,omitempty"`
	Template     string         `json:"template,omitempty"`
	System       string         `json:"system,omitempty"`
	Messages     []Message      `json:"messages,omitempty"`
	Details      ModelDetails   `json:"details,omitempty"`
	ModelInfo    map[string]any `json:"model_info,omitempty"`
	Tensors      []Tensor       `json:"tensors,omitempty"`
	Capabilities []string       `json:"capabilities,omitempty"`
	ModifiedAt   time.Time      `json:"modified_at,omitempty"`
}

// DeleteRequest is the body of DELETE /api/delete.
type DeleteRequest struct {
	Model string `json:"model"`

	// Name is deprecated, see Model
	Name string `json:"name"`
}

// CopyRequest is the body of POST /api/copy.
type CopyRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// ProcessResponse is the body of GET /api/ps.
type ProcessResponse struct {
	Models []ProcessModelResponse `json:"models"`
}

// ProcessModelResponse is one loaded model. Size is the resident size (weights and KV cache), as Ollama's.
// KVCache and PeakSize are mlxg's additions: the KV cache layout it chose, and the predicted peak memory
// (Size plus activations and scratch) that the scheduler budgets.
type ProcessModelResponse struct {
	Name          string        `json:"name"`
	Model         string        `json:"model"`
	Size          int64         `json:"size"`
	Digest        string        `json:"digest"`
	Details       ModelDetails  `json:"details,omitempty"`
	ExpiresAt     time.Time     `json:"expires_at"`
	SizeVRAM      int64         `json:"size_vram"`
	ContextLength int           `json:"context_length"`
	ContextReason string        `json:"context_reason,omitempty"` // why that context: sized from memory, the model's maximum, num_ctx
	KVCache       string        `json:"kv_cache,omitempty"`
	PeakSize      int64         `json:"size_peak,omitempty"` // the predicted peak the scheduler budgets
	Batch         *ProcessBatch `json:"batch,omitempty"`     // the continuous batch, when the model batches
	Ranks         []ProcessRank `json:"ranks,omitempty"`     // the machines a model split over several runs on
	// Streaming is the weight residency of a model loaded in streaming mode (experts, or a
	// dense model's layers, read from the checkpoint through a RAM cache); nil when all its
	// weights are mapped.
	Streaming *ProcessStreaming `json:"streaming,omitempty"`
	Draft     string            `json:"draft,omitempty"` // the draft model loaded with it for speculative decoding
	// Vision is the memory of the vision tower the model runs (nil: it reads text only).
	Vision *ProcessVision `json:"vision,omitempty"`
}

// ProcessVision is what a model's vision tower takes in memory, in /api/ps (an mlxg extension):
// its weights are part of size, its activations part of size_peak.
type ProcessVision struct {
	Weights     int64 `json:"weights"`     // the tower's weights
	Activations int64 `json:"activations"` // encode_peak plus features
	EncodePeak  int64 `json:"encode_peak"` // the peak of encoding the largest image
	MaxPatches  int   `json:"max_patches"` // that image's patches (the processor's pixel budget)
	MaxPixels   int   `json:"max_pixels"`  // the pixel budget an image is resized within
	// Lowered: the memory plan lowered the pixel budget from the checkpoint's to fit.
	Lowered  bool  `json:"lowered,omitempty"`
	Features int64 `json:"features"` // the most the encoded features kept for reuse take
}

// ProcessStreaming is a model's weight residency in /api/ps (an mlxg extension).
type ProcessStreaming struct {
	Resident  int64   `json:"resident"`   // bytes of weights in memory: the pinned ones and the cached experts
	Weights   int64   `json:"weights"`    // bytes of all the weights
	Budget    int64   `json:"budget"`     // the most bytes of weights kept in memory now
	Hits      int64   `json:"hits"`       // expert reads served from memory
	Misses    int64   `json:"misses"`     // expert reads from the checkpoint
	BytesRead int64   `json:"bytes_read"` // bytes read from the checkpoint since the load
	HitRate   float64 `json:"hit_rate"`
	// Layers and KeptLayers: a dense model streams its decoder layers (Hits and Misses
	// count layers then), of which the budget keeps KeptLayers in memory.
	Layers     int `json:"layers,omitempty"`
	KeptLayers int `json:"kept_layers,omitempty"`
}

// ProcessRank is one rank of a model split over several machines, in /api/ps (an mlxg extension).
type ProcessRank struct {
	Rank   int    `json:"rank"`
	Host   string `json:"host"`
	Layers string `json:"layers"` // the layers it holds ("0-13"), or "head only"
	State  string `json:"state"`  // ready, gone, or stalled
}

// ProcessBatch is a loaded model's continuous batch in /api/ps (an mlxg extension).
type ProcessBatch struct {
	MaxSequences  int     `json:"max_sequences"`  // sequences batched at once (MLXG_NUM_PARALLEL, or fewer when memory says so)
	Running       int     `json:"running"`        // sequences in the batch now
	Waiting       int     `json:"waiting"`        // requests waiting for a place in it
	Steps         int64   `json:"steps"`          // forward passes run
	MeanSequences float64 `json:"mean_sequences"` // sequences per pass, on average
}

// OllamaVersion is the Ollama version /api/version reports in "version": the release whose API mlxg
// follows (its routes and fields were compared with Ollama v0.33.0's source). Clients read this field to
// decide what the server can do, and some refuse a development version or anything below 0.6.4, so it is
// an Ollama release number, not mlxg's own version (that is "mlxg_version").
const OllamaVersion = "0.33.0"

// VersionResponse is the body of GET /api/version: Version is OllamaVersion, MLXGVersion mlxg's own
// (absent when the server is Ollama itself).
type VersionResponse struct {
	Version     string `json:"version"`
	MLXGVersion string `json:"mlxg_version,omitempty"`
}
