// Package registry names models, keeps the local store (the Hugging Face hub cache layout), pulls checkpoints from the Hub and reads their metadata.
package registry
