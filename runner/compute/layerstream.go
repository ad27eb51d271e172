package compute

// LayerStreamSource is a StreamSource of a dense model whose decoder layers stream: a
// backend that can binds each layer's quantized matrices (those under a
// "<prefix>.layers.<i>." name) to one unit of the residency manager per layer, read
// while the layers before it compute, and binds everything else (embeddings, norms, the
// head) as usual. It tells the backend once every weight is bound (FinishStream), since
// a layer's unit is made of all its matrices.
type LayerStreamSource interface {
	StreamSource
	StreamsLayers() bool
}

// StreamFinisher is a backend that binds weights to a residency manager's units and
// needs to know when the model's last weight is bound (to make the layers' units).
type StreamFinisher interface {
	FinishStream(src StreamSource) error
}
