package metal

// Evals is how many times the backend has called mlx_eval.
func (b *Backend) Evals() int { return int(b.lib.evals.Load()) }
