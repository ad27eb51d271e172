package compute

import "github.com/mlxg/mlxg/runner/residency"

// StreamSource is a Source whose model streams weights through a weight residency
// manager: a backend that can reads the stacked expert matrices it binds from the
// manager's units (one expert's gate, up and down rows with their scales and biases)
// instead of through the mapping, and binds everything else as usual. A backend that
// cannot ignores it and reads the mapping.
type StreamSource interface {
	Source
	Residency() *residency.Manager
	// Locate is the file holding the named tensor and the offset of its data there.
	Locate(name string) (path string, off int64, ok bool)
}

// ExpertGuesser is a Context whose backend streams a mixture-of-experts block's experts
// and can start reading them before the block runs, on a guess of its router's picks:
// the model runs the hidden state of the layer it is computing through the next
// block's norm and router, and hands the logits over. A guess changes only what is
// read and when, never a result.
type ExpertGuesser interface {
	// WantsExpertGuess reports whether the block whose stacked gate matrix is gate
	// streams its experts and would use a guess for a pass of rows rows routed by r (a
	// prompt's pass, which reads most experts in order anyway, would not).
	WantsExpertGuess(gate Weight, rows int, r Routing) bool
	// GuessExperts starts reading the experts that the rows of logits (rows × experts)
	// pick under r, for the block whose stacked gate matrix is gate, behind the reads
	// of the pass's next MoE.
	GuessExperts(logits Tensor, gate Weight, experts int, r Routing)
}
