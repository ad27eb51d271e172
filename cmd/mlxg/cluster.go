package main

import "os"

// Several machines: rank 0 is `mlxg serve --hostfile FILE`, every other machine runs
// `mlxg worker --hostfile FILE --rank N`; runner/pipeline splits each model over them.

const clusterEnvHelp = `  MLXG_HOSTFILE, MLX_HOSTFILE         an MLX hostfile ([["host0:port"], ["host1:port"], ...], JSON): serve the models
                                      as a pipeline over these machines; this is rank 0 (MLX_RANK, if set, must be 0),
                                      the others run ` + "`mlxg worker`" + `
  MLXG_DISTRIBUTED_BACKEND            MLX's distributed backend (default "ring"; "jaccl" over Thunderbolt 5 RDMA)
  MLXG_RANK_TIMEOUT                   how long rank 0 waits for the workers in one exchange (default 10m)`

// hostfileFrom is the hostfile a command was given: the flag, else MLXG_HOSTFILE, else
// MLX_HOSTFILE ("" when none).
func hostfileFrom(flag string) string {
	if flag != "" {
		return flag
	}
	_, v := envFirst("MLXG_HOSTFILE", "MLX_HOSTFILE")
	return v
}

// exitStuck ends the process when a broken pipeline's transfer holds the shutdown
// (pipeline.Cluster.ExitIfStuck); a test that runs serve in its own process replaces
// it, so that the exit does not end the other tests.
var exitStuck = func() { os.Exit(1) }
