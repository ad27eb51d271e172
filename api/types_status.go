package api

import "time"

// StatusResponse is GET /api/status (an mlxg extension; Ollama has no such route): what the server holds and
// does now, for the dashboard, `mlxg mcp`'s memory_status and scripts. GET /api/status/events streams the same
// object as server-sent events.
type StatusResponse struct {
	Time        time.Time        `json:"time"`
	Version     string           `json:"version"`
	Models      []StatusModel    `json:"models"`
	Memory      StatusMemory     `json:"memory"`
	PrefixCache *StatusPrefix    `json:"prefix_cache,omitempty"` // nil when the server runs without one
	Throughput  StatusThroughput `json:"throughput"`
	Requests    []StatusRequest  `json:"requests"` // the latest finished requests, newest first
}

// StatusModel is one loaded model.
type StatusModel struct {
	Name          string `json:"name"`
	Backend       string `json:"backend,omitempty"` // the compute backend ("cpu", "mlx-metal"...)
	Size          int64  `json:"size"`              // resident bytes, as /api/ps reports them
	Peak          int64  `json:"size_peak"`         // the predicted peak the scheduler budgets
	SizeVRAM      int64  `json:"size_vram"`
	ContextLength int    `json:"context_length"`
	ContextReason string `json:"context_reason,omitempty"` // why that context, as /api/ps says
	// KVHeld is the bytes its running sequences' KV caches hold now; ContextUsed what its latest finished
	// request held (nil before one).
	KVHeld      int64             `json:"kv_held"`
	ContextUsed *StatusContextUse `json:"context_used,omitempty"`
	KVCache     string            `json:"kv_cache,omitempty"` // the layout as /api/ps and `mlxg ps` print it
	Active      int               `json:"active"`             // requests holding it now
	ExpiresAt   time.Time         `json:"expires_at"`         // when it unloads once idle
	Forever     bool              `json:"forever,omitempty"`  // keep_alive < 0: it never expires
	Batch       *ProcessBatch     `json:"batch,omitempty"`
	Plan        *KVPlan           `json:"kv_plan,omitempty"` // nil when the server runs without a KV policy
	Draft       string            `json:"draft,omitempty"`   // the draft model loaded with it, as in /api/ps
}

// StatusContextUse is what one request held of a model's context.
type StatusContextUse struct {
	Tokens          int   `json:"tokens"`           // in its KV cache at the end: the prompt (after any cut) and the reply
	KVBytes         int64 `json:"kv_bytes"`         // those tokens' KV bytes
	Restored        int   `json:"restored"`         // prompt tokens the prefix cache restored instead of computing
	Truncated       int   `json:"truncated"`        // prompt tokens cut to fit the context
	MessagesDropped int   `json:"messages_dropped"` // chat messages cut to fit the context
}

// KVPlan is the KV-cache policy's plan a model loaded with.
type KVPlan struct {
	Layout        string        `json:"layout"`        // as KVCache
	Context       int           `json:"context"`       // tokens one sequence may hold
	FitContext    int           `json:"fit_context"`   // the largest context that fits with this layout
	TokenBytes    int64         `json:"token_bytes"`   // KV bytes one more token adds
	KVBytes       int64         `json:"kv_bytes"`      // one sequence's KV cache at Context
	Weights       int64         `json:"weights"`       // bytes
	Overhead      int64         `json:"overhead"`      // bytes
	PrefixBudget  int64         `json:"prefix_budget"` // the prefix cache's RAM budget the plan left
	Reason        string        `json:"reason,omitempty"`
	ContextReason string        `json:"context_reason,omitempty"` // why Context: sized from memory, the model's maximum, num_ctx
	Layers        []KVLayerPlan `json:"layers"`                   // every layer of the model, in order
}

// KVLayerPlan is one layer's cache storage. Bits are labelled as in /api/ps: "16" (fp16), "8", "6", "4", "q4_0",
// with an "h" after them where the layer stores its keys or values Hadamard-rotated ("6h", "q4_0h").
type KVLayerPlan struct {
	Layer      int    `json:"layer"`
	Kind       string `json:"kind"` // full, sliding, recurrent or none
	KBits      string `json:"k_bits,omitempty"`
	VBits      string `json:"v_bits,omitempty"`
	KGroup     int    `json:"k_group,omitempty"` // elements per scale (0 for fp16)
	VGroup     int    `json:"v_group,omitempty"`
	Boundary   bool   `json:"boundary,omitempty"`    // one of the first or last KV layers, kept at higher precision
	TokenBytes int64  `json:"token_bytes,omitempty"` // bytes one token takes in this layer
}

// StatusMemory is the machine's memory and what the server's models take of it.
type StatusMemory struct {
	Total       uint64 `json:"total"`
	Available   uint64 `json:"available"`
	SwapTotal   uint64 `json:"swap_total"`
	SwapUsed    uint64 `json:"swap_used"`
	Pressure    string `json:"pressure"` // normal, warn, critical; "" when it cannot be read
	Error       string `json:"error,omitempty"`
	Weights     int64  `json:"weights"`      // the loaded models' weights
	KV          int64  `json:"kv"`           // their KV caches at their context (what the plans allow)
	KVHeld      int64  `json:"kv_held"`      // what their running sequences' KV caches hold now
	PrefixCache int64  `json:"prefix_cache"` // the prefix cache's RAM tier
	PrefixSSD   int64  `json:"prefix_ssd"`   // the prefix cache's SSD tier (on disk, not in memory)
}

// StatusPrefix is the prefix cache: blocks held in RAM and on SSD, and how often they were reused.
type StatusPrefix struct {
	RAMBlocks  int64 `json:"ram_blocks"`
	RAMBytes   int64 `json:"ram_bytes"`
	DiskBlocks int64 `json:"ssd_blocks"`
	DiskBytes  int64 `json:"ssd_bytes"`
	RAMHits    int64 `json:"ram_hits"`
	DiskHits   int64 `json:"ssd_hits"`
	Misses     int64 `json:"misses"`
	Lookups    int64 `json:"lookups"`
}

// StatusThroughput is the server's recent speed, over the requests of the last minute, and its load now.
type StatusThroughput struct {
	PrefillTPS    float64 `json:"prefill_tps"`  // prompt tokens per second of prefill
	DecodeTPS     float64 `json:"decode_tps"`   // generated tokens per second of decode
	TTFTSeconds   float64 `json:"ttft_seconds"` // mean time to first token (load and prefill)
	Requests      int     `json:"requests"`     // requests finished in the window
	WindowSeconds float64 `json:"window_seconds"`
	Queued        int     `json:"queued"` // requests waiting for a model or a place in a batch
	Active        int     `json:"active"` // requests running now
}

// StatusRequest is one finished generation request and its PERF log line.
type StatusRequest struct {
	Time         time.Time `json:"time"`
	Model        string    `json:"model"`
	PromptTokens int       `json:"prompt_tokens"`
	EvalTokens   int       `json:"eval_tokens"`
	PrefillS     float64   `json:"prefill_s"`
	DecodeS      float64   `json:"decode_s"`
	LoadS        float64   `json:"load_s"`
	TotalS       float64   `json:"total_s"`
	Done         string    `json:"done"` // stop, length, cancelled or error
	Perf         string    `json:"perf"` // the PERF line the server logged
}
