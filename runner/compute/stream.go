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
