// Package registry names models, keeps the local store, pulls checkpoints from the Hugging Face Hub and
// reads their metadata.
//
// Names (ParseName): "org/name[:revision]", "hf.co/org/name", "huggingface.co/org/name", and bare
// "name[:tag]" names, which Store.Lookup resolves through user aliases (Store.Copy), models made on this
// machine (repo local/name, Store.ImportDir) and the Ollama library names of Library, in that order. Unsafe names ("..", absolute
// paths, backslashes, control characters, over MaxNameLen bytes) are refused before any disk access.
//
// The store (Store) is the Hugging Face hub cache, laid out exactly as huggingface_hub lays it out
// (models--org--name/{blobs/<etag>, snapshots/<commit>/<file> -> ../../blobs/<etag>, refs/<revision>}), so
// checkpoints downloaded by mlx-lm or huggingface-cli are listed and usable, and the other way round;
// mlxg's own state (aliases, pull times) is state.json in Store.Home.
//
// Store.Pull downloads a checkpoint's files through the Hub's HTTP API (model info with blobs, /resolve/),
// resuming, retrying, verifying and locking as its doc says, and reports Progress events. ReadInfo reads what
// show reports from config.json and the safetensors headers. Not supported: datasets and spaces, Xet-only
// downloads without an LFS sha256, files in repo subfolders, and pushing.
package registry
