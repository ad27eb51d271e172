// Package metal is the Metal backend: Apple's MLX through libmlxc, bound at run time with purego.
package metal
