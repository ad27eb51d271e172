// Package kvstore holds the KV cache: per-layer layout and bit-widths, the memory policy, paged blocks and the RAM and SSD prefix tiers.
package kvstore
