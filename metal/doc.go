// Package metal is the MLX backend: Apple's MLX through its C API (libmlxc, mlx-c 0.5.x
// or 0.6.x), bound at run time with purego so that the binary still builds with
// CGO_ENABLED=0. On a Mac it runs on the GPU (Metal); on Linux amd64/arm64 it loads
// the same library where the user installed MLX and mlx-c (docs/backends.md) and runs on
// MLX's CPU backend (or on CUDA where MLX was built with it), chosen only by MLXG_BACKEND=mlx.
//
// Open finds and loads libmlxc ($MLXG_MLXC_PATH, next to the executable, then the
// system's lib directories), binds every function of its signature table (capi.go:
// each Go function beside the C prototype it was declared from, checked by tests),
// installs an error handler so that a failing call returns MLX's message as an *Error
// instead of MLX printing it and exiting, and reports the MLX version.
//
// The Backend (compute.Backend on MLX arrays) runs every mlx-c call that touches a
// stream or an array on one goroutine locked to one OS thread (MLX 0.31 keeps streams
// per thread), builds each forward pass's graph lazily and evaluates it with one
// mlx_eval, and wraps mmapped weights (without copying where Metal accepts the pages;
// MLX's CPU backend copies them). Attention reads the KV cache where kvstore keeps it,
// block by block (attend.go), so the cache lives once, with gpt-oss's sinks as one more
// softmax column and GLM-4.7-Flash's latent layers scored twice, rotary keys and latents
// (latent.go); the optional operations of the mixture-of-experts, Gemma and Gated
// DeltaNet layers are built from MLX operations (ext.go: every router, softmax or
// DeepSeek's sigmoid, picks on the device, and gather_qmm reads only the experts a
// token picked, mxfp4 ones included); the vision towers' operations and Gemma 3's
// attention among an image's rows, a mask widened per row over the same blocks, are in
// vision.go. LimitsFor maps the memory
// policy's plan to MLX's allocator limits, summed over the loaded models and capped at
// the GPU's recommended working set.
//
// Errors: a failing mlx-c call (bad shapes, a refused limit, an allocation MLX turns
// down when it builds the graph) comes back as an error. A failure inside the GPU's
// execution does not: MLX raises it in a Metal completion handler, where it ends the
// process (std::terminate). The memory policy's plan, which keeps weights, KV cache and
// activations under the working set, is the only guard against running out there.
//
// The package registers the backend with runner/compute under the name "mlx" in its
// init (driver.go), so that a program has MLX built in by importing it, as cmd/mlxg
// does; the code that chooses and checks backends (runner/backend) opens it by that
// name and never imports this package, which keeps libmlxc's bindings out of every
// program that does not ask for them.
//
// Verification: where a libmlxc is installed (MLXG_MLXC_PATH, or Homebrew's on a Mac) the
// tests run against it: every operation of `mlxg doctor`, every architecture's logits and
// greedy tokens against transformers and the CPU backend, quantized KV specs, prefix-cache
// restores and the API clients through `mlxg serve`; elsewhere they skip, saying why.
// `mlxg doctor` is the MLX backend's test where CI cannot reach it: the Homebrew
// formula's test runs it, so an install on a Mac checks the GPU path.
package metal
