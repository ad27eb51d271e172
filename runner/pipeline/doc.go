// Package pipeline runs one model split over several machines, each holding a
// contiguous range of its layers: pipeline parallelism. Its point is a model larger
// than one machine's memory (each machine maps and binds only its own layers' weights,
// and keeps only its own layers' KV); a single stream runs no faster than on one
// machine that could hold it, since the ranks take turns.
//
// # Stages
//
// Split cuts the layers into one Stage per rank, as evenly as they go. Rank 0 embeds
// the tokens and runs its layers, then hands the residual stream to rank 1, which runs
// its own, and so on; the last rank applies the final norm and the head and hands the
// logits back to rank 0. A stage is an ordinary model (runner/model) loaded with the
// other ranks' weights left unbound, whose passes run through a stage context that
// skips what this rank does not hold and sends or receives the residual stream where
// its own layers begin and end (stage.go). No architecture has pipeline code, and every
// layer computes what it would in one process, so the logits are the same.
//
// Two things go beyond the stream, both Gemma 4's (E2B, E4B). A tensor that later layers
// read beside the stream, computed before the first layer (the per-layer inputs), is
// marked by the network (compute.CarryContext): rank 0 computes it and sends it in the
// same transfer as the stream, beside it, to every rank that runs layers. A layer that
// reads another layer's KV (a KV-shared layer) must run on that layer's rank, since a
// rank keeps only its own layers' KV: the architecture registers which layer each reads
// (model.RegisterKVSources) and SplitShared cuts nowhere between them, as near the even
// cuts as it can; a model with too few places to cut for the ranks is refused
// (SplitError, which the server answers with a 400).
//
// Images are read on rank 0, which holds the vision tower beside the embeddings (the
// workers bind none of it): it encodes them and puts their features in the image rows'
// place (model.Batch.EmbedWith). The layers of every rank read the images' places, for
// M-RoPE positions and the spans whose rows attend to each other: rank 0 sends them with
// each pass (Message.Media), and a worker attaches them to the sequence's caches for the
// pass as model.Media marked Elsewhere (no features), which is what a layer reads in one
// process.
//
// # Who leads
//
// Rank 0 is the server (`mlxg serve --hostfile`): it runs the generation loop, the
// scheduler and the API, and its Leader drives everything. The other ranks are workers
// (`mlxg worker`, RunWorker) with no state of their own to decide from: they load what
// rank 0 loads and run the passes it sends, so that one process owns every decision
// (what is loaded, which sequences run, when caches are truncated) and the workers
// cannot drift from it. The engine uses a pipeline when its load options name the
// Leader (runner.LoadOptions.Pipeline); a model loaded that way is used as any other.
//
// # The protocol
//
// Two channels run over one MLX distributed group (metal.Group: the ring backend by
// default, which connects each rank to its neighbours only). The activations go as
// MLX send and receive ops in each pass's graph, evaluated with the pass, so that no
// copy through Go is needed. Beside them, rank 0 sends small int32 control messages (Message: load,
// unload, forward, batched forward, prefix restore, save and end, ping, hello, stop)
// that every rank passes on to the next before acting, and every message but stop is
// answered by a status that goes around the ring, each rank putting in its own
// failure and its error's text; the worst comes back to rank 0, which fails the request
// with that rank's words. A rank that cannot run its part of a pass (an op its backend
// lacks, a bad cache: any failure before the pass is evaluated, which on MLX performs
// no transfer) still performs every transfer of the pass, with zeros, so that no other
// rank is left waiting, and reports its failure in the status round: the request fails
// at once, the pipeline stays usable. A failure while MLX evaluates a pass (some of its
// transfers may have run) or a transfer that fails leaves the ring in an unknown state:
// that breaks the pipeline, as a rank that dies does.
//
// Both channels are interfaces: Wire for the control messages, Comm (on a backend's
// contexts) for the activations. MLX's distributed layer is the only implementation
// between machines; the tests run the ranks as goroutines of one process over
// pipelinetest's in-memory one, on the CPU backend.
//
// MLX's ring has no timeout and no notice of a peer that died: a transfer to it blocks
// forever. So each worker also keeps a TCP connection to rank 0 (Cluster, RunWorker):
// its end tells rank 0 that the rank is gone (the pipeline then fails every request,
// naming the rank) and tells a worker that rank 0 is gone (it exits). Rank 0 writes a
// byte on it before each message, which lets an idle worker wait there instead of in
// MLX's receive, which polls its socket and keeps a core busy.
//
// # Caches
//
// Each rank keeps the KV of its own layers only. Rank 0 describes each sequence's
// caches as its memory policy made them (kvstore.Describe) with the sequence's first
// pass, so that every rank's layers get the kinds one process would have given them;
// each worker's own memory policy plans its memory for its share (StageShape). Each
// rank's prefix cache keeps its own layers' blocks under the same chain of token
// blocks, and rank 0 asks the workers to restore the same prefix it restored: a rank
// that has less makes every rank compute the prompt again.
package pipeline
