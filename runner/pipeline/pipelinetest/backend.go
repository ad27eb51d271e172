package pipelinetest

import (
	"encoding/binary"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/pipeline"
)

// Backend is one rank's backend: the wrapped one (the CPU backend), whose contexts
// also move activations over the Net (pipeline.Comm), and which tallies the work each
// pass did (Work), so that a test can see which layers each rank ran.
type Backend struct {
	compute.Backend
	net  *Net
	rank int

	mu    sync.Mutex
	layer map[compute.Weight]int // the decoder layer whose weight it is
	head  map[compute.Weight]bool
	work  Work
}

// Work is what a rank's passes computed: every pass (a context in which the rank ran
// anything), each decoder layer's passes (a layer runs in a pass when one of its
// weights' products does), and the passes that embedded tokens and ran the output head.
type Work struct {
	Passes int
	Layers map[int]int
	Embeds int
	Heads  int
}

// Backend wraps inner as rank's backend on n.
func (n *Net) Backend(rank int, inner compute.Backend) *Backend {
	return &Backend{Backend: inner, net: n, rank: rank, layer: map[compute.Weight]int{}, head: map[compute.Weight]bool{}}
}

// Rank is the backend's rank.
func (b *Backend) Rank() int { return b.rank }

// Work is the work tallied so far.
func (b *Backend) Work() Work {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.work
	w.Layers = map[int]int{}
	for i, n := range b.work.Layers {
		w.Layers[i] = n
	}
	return w
}

// ResetWork starts the tally again.
func (b *Backend) ResetWork() {
	b.mu.Lock()
	b.work = Work{}
	b.mu.Unlock()
}

var layerIndex = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)

// Weight binds on the wrapped backend, noting which layer the weight belongs to.
func (b *Backend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	w, err := b.Backend.Weight(src, prefix, q)
	if err != nil {
		return w, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := layerIndex.FindStringSubmatch(prefix); m != nil {
		i, _ := strconv.Atoi(m[1])
		b.layer[w] = i
	} else if strings.HasPrefix(prefix, "lm_head") || strings.HasSuffix(prefix, "embed_tokens") {
		b.head[w] = true // the head, or the embeddings a tied head multiplies by
	}
	return w, nil
}

// NewContext is a context of the wrapped backend that also sends and receives.
func (b *Backend) NewContext() compute.Context {
	return &context{Context: b.Backend.NewContext(), b: b, layers: map[int]bool{}}
}

// context is a pass on one rank. Transfers happen when they are called: the wrapped
// CPU context computes each op as it is called, so a received tensor must hold its
// values at once, and a sent one is copied out before the pass frees its buffer. (MLX
// performs them when the pass is evaluated; the two orders move the same values.) A
// pass that fails performs none on MLX, since a failed pass is never evaluated: so here
// a receive made before the failure is undone (its message goes back to the front of
// its link, for the transfers the rank then makes with zeros), and a pass that has
// failed receives nothing. (The stages never send before an op that can fail: a rank
// sends once its layers are done.)
type context struct {
	compute.Context
	b        *Backend
	layers   map[int]bool
	embed    bool
	head     bool
	received []received // this pass's receives, while it has not failed
}

type received struct {
	src int
	p   packet
}

var _ pipeline.Comm = (*context)(nil)

// Unwrap lets compute.Ext find the wrapped context's optional operations.
func (c *context) Unwrap() compute.Context { return c.Context }

// Free passes on to the wrapped context (a Freer is found by assertion, not Ext).
func (c *context) Free(keep ...compute.Tensor) { compute.Free(c.Context, keep...) }

func (c *context) Embed(w compute.Weight, ids []int32) compute.Tensor {
	c.embed = true
	return c.Context.Embed(w, ids)
}

func (c *context) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	c.b.mu.Lock()
	if i, ok := c.b.layer[w]; ok {
		c.layers[i] = true
	} else if c.b.head[w] {
		c.head = true
	}
	c.b.mu.Unlock()
	return c.Context.Linear(x, w)
}

// Close adds the pass to the rank's tally when it computed anything.
func (c *context) Close() {
	if c.embed || c.head || len(c.layers) > 0 {
		c.b.mu.Lock()
		w := &c.b.work
		w.Passes++
		if w.Layers == nil {
			w.Layers = map[int]int{}
		}
		for i := range c.layers {
			w.Layers[i]++
		}
		if c.embed {
			w.Embeds++
		}
		if c.head {
			w.Heads++
		}
		c.b.mu.Unlock()
	}
	c.Context.Close()
}

// Send implements pipeline.Comm: x's values go to rank dst now.
func (c *context) Send(x compute.Tensor, dst int) compute.Tensor {
	v, err := c.Context.Float32s(x)
	if err != nil {
		c.unreceive()
		return x // the pass has failed already: Float32s of x reports it
	}
	rows, cols := x.Dims()
	if err := c.b.net.send(c.b.rank, dst, packet{floats: v, rows: rows, cols: cols, isFloat: true}); err != nil {
		return compute.Fail(c.Context, err)
	}
	return x
}

// Recv implements pipeline.Comm: the next message from rank src, rows × cols.
func (c *context) Recv(rows, cols, src int) compute.Tensor {
	if err := c.Context.Err(); err != nil {
		c.unreceive()
		return compute.Fail(c.Context, err)
	}
	p, err := c.b.net.recv(src, c.b.rank, packet{rows: rows, cols: cols, isFloat: true})
	if err != nil {
		return compute.Fail(c.Context, err)
	}
	c.received = append(c.received, received{src, p})
	return c.host(rows, cols, p.floats)
}

// Float32s evaluates x; a failed pass undoes its receives.
func (c *context) Float32s(x compute.Tensor) ([]float32, error) {
	v, err := c.Context.Float32s(x)
	if err != nil {
		c.unreceive()
	}
	return v, err
}

// unreceive puts the messages this failed pass received back at the front of their
// links, last first, so that they are received again in their order.
func (c *context) unreceive() {
	for i := len(c.received) - 1; i >= 0; i-- {
		r := c.received[i]
		c.b.net.unrecv(r.src, c.b.rank, r.p)
	}
	c.received = nil
}

// Zeros implements pipeline.Comm.
func (c *context) Zeros(rows, cols int) compute.Tensor {
	return c.host(rows, cols, make([]float32, rows*cols))
}

// host makes a rows × cols tensor of v in the wrapped context. The compute interface
// has no op that takes values from the host, but the embedding of an unquantized
// weight copies its rows exactly: v becomes a float32 weight of rows rows, all of
// which are embedded.
func (c *context) host(rows, cols int, v []float32) compute.Tensor {
	raw := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(f))
	}
	const name = "received.weight"
	t := &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: []int{rows, cols}, End: int64(len(raw))}, Data: raw}
	w, err := c.b.Backend.Weight(source{name: t}, "received", compute.Quant{})
	if err != nil {
		return compute.Fail(c.Context, err)
	}
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(i)
	}
	return c.Context.Embed(w, ids)
}

// source is a compute.Source of tensors in memory.
type source map[string]*safetensors.Tensor

func (s source) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := s[name]; return t, ok }
