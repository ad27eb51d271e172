// Package metal is the Metal backend: Apple's MLX through its C API (libmlxc, mlx-c
// 0.5.x or 0.6.x), bound at run time with purego so that the macOS binary still builds
// with CGO_ENABLED=0.
//
// Open finds and loads libmlxc ($MLXG_MLXC_PATH, next to the executable,
// /opt/homebrew/lib, /usr/local/lib), binds every function of its signature table
// (capi.go: each Go function beside the C prototype it was declared from, checked by
// tests), installs an error handler so that a failing call returns MLX's message as an
// *Error instead of MLX printing it and exiting, and reports the MLX version.
//
// Only darwin/arm64 loads the library. Every other platform gets an Open that returns an
// *UnavailableError wrapping ErrUnsupportedPlatform, and no purego in its binary.
//
// The Backend (compute.Backend on MLX arrays) runs every mlx-c call on one OS thread,
// builds each forward pass's graph lazily and evaluates it with one mlx_eval, wraps
// mmapped weights without copying where Metal accepts the pages, and mirrors each KV
// layer on the GPU in its own format: fp16 through mlx.fast's fused attention, MLX
// affine through quantized_matmul on the packed codes (never dequantizing the cache);
// q4_0 and sliding-window layers, and layers holding positions the GPU never saw,
// attend in Go. LimitsFor maps the memory policy's plan to MLX's allocator limits.
//
// Verification status: no Apple Silicon machine was available where this was written,
// so nothing here has run against a real libmlxc. Tested on Linux: the signature table
// against the C prototypes; every binding through purego against a stand-in library
// compiled from those prototypes (Linux's C ABI, not Apple's); status and error
// handling, the search order and the unavailability path; and the Backend on a Go
// model of the mlx-c calls it makes (emu_test.go), where it passes every check of
// `mlxg doctor`. On a Mac, `mlxg doctor` runs those checks against MLX itself.
package metal
