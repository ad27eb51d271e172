package main

// The compute backends built into mlxg. Each registers itself with runner/compute in its
// init, under the name runner/backend's chooser opens it by (MLXG_BACKEND=cpu; metal and
// mlx both take "mlx"); this is the one place that decides which are linked in.
import (
	_ "github.com/mlxg/mlxg/metal"      // "mlx": MLX through libmlxc (Metal on a Mac)
	_ "github.com/mlxg/mlxg/runner/cpu" // "cpu": the pure-Go backend
)
