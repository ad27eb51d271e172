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
// Verification status: no Apple Silicon machine was available where this was written.
// The signature table, the status and error handling, the search order and the
// unavailability path are unit-tested here; nothing has yet run against a real libmlxc.
// `mlxg doctor` on a Mac runs every backend operation against the CPU backend.
package metal
