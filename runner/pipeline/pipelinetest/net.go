// Package pipelinetest runs a pipeline (runner/pipeline) inside one test process, so
// that its stages, hand-overs and control protocol are tested on the CPU backend: the
// ranks are goroutines, and an in-memory transport (Net) stands in for MLX's
// distributed layer, both for the control messages (pipeline.Wire) and for the
// activations (pipeline.Comm, on the contexts of a wrapping Backend).
//
// Only tests import it. Between machines the pipeline runs over MLX's distributed layer
// and nothing else; this transport never leaves the process.
package pipelinetest

import (
	"fmt"
	"sync"
	"time"
)

// Net joins the ranks of one in-process pipeline: a first-in first-out queue per
// ordered pair of ranks, as MLX's send and receive pair up per peer. It is strict where
// MLX would hang or misread: a receive that expects other data than the next message
// on its link (ints for floats, or another length) fails, naming both, and so does a
// receive that waits longer than Timeout.
type Net struct {
	size  int
	links [][]chan packet // [src][dst]
	done  chan struct{}
	once  sync.Once
	// Timeout bounds a receive (and a send into a full link); 0: a minute.
	Timeout time.Duration
	// Tamper, when set, is called with every float32 message before it is queued, and
	// may change it: a test proves with it that a wrong hand-over changes the logits.
	Tamper func(src, dst int, v []float32)

	mu      sync.Mutex
	traffic map[[2]int]Traffic
	cut     map[int]bool        // ranks that went away (Cut)
	back    map[[2]int][]packet // messages a failed pass received, to be received again first
}

// Traffic is what one link carried.
type Traffic struct {
	Ints, Floats           int // messages of each kind
	IntValues, FloatValues int // their values, together
}

type packet struct {
	ints       []int32
	floats     []float32
	rows, cols int
	isFloat    bool
}

func (p packet) String() string {
	if p.isFloat {
		return fmt.Sprintf("%d×%d float32s", p.rows, p.cols)
	}
	return fmt.Sprintf("%d int32s", len(p.ints))
}

// linkDepth is how many messages a link holds before a send waits: the protocol never
// has more than a few in flight on one link.
const linkDepth = 64

// NewNet makes the links of size ranks.
func NewNet(size int) *Net {
	n := &Net{size: size, done: make(chan struct{}), traffic: map[[2]int]Traffic{}}
	n.links = make([][]chan packet, size)
	for s := range n.links {
		n.links[s] = make([]chan packet, size)
		for d := range n.links[s] {
			n.links[s][d] = make(chan packet, linkDepth)
		}
	}
	return n
}

// Size is the number of ranks.
func (n *Net) Size() int { return n.size }

// Close fails every transfer waiting or to come, so that no rank is left blocked.
func (n *Net) Close() { n.once.Do(func() { close(n.done) }) }

// Cut makes rank go away as a dead machine does on MLX's ring: what is sent to it or
// by it is lost, and a receive from it or by it waits until the net closes, since the
// ring has no timeout and no notice of a dead peer.
func (n *Net) Cut(rank int) {
	n.mu.Lock()
	if n.cut == nil {
		n.cut = map[int]bool{}
	}
	n.cut[rank] = true
	n.mu.Unlock()
}

func (n *Net) isCut(src, dst int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[src] || n.cut[dst]
}

// Traffic is what the link from src to dst carried so far.
func (n *Net) Traffic(src, dst int) Traffic {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.traffic[[2]int{src, dst}]
}

func (n *Net) timeout() time.Duration {
	if n.Timeout > 0 {
		return n.Timeout
	}
	return time.Minute
}

func (n *Net) check(src, dst int) error {
	if src < 0 || src >= n.size || dst < 0 || dst >= n.size || src == dst {
		return fmt.Errorf("pipelinetest: no link from rank %d to rank %d among %d ranks", src, dst, n.size)
	}
	return nil
}

func (n *Net) send(src, dst int, p packet) error {
	if err := n.check(src, dst); err != nil {
		return err
	}
	if n.isCut(src, dst) {
		return nil
	}
	if p.isFloat && n.Tamper != nil {
		n.Tamper(src, dst, p.floats)
	}
	t := time.NewTimer(n.timeout())
	defer t.Stop()
	select {
	case n.links[src][dst] <- p:
	case <-n.done:
		return fmt.Errorf("pipelinetest: rank %d sending to rank %d: the net is closed", src, dst)
	case <-t.C:
		return fmt.Errorf("pipelinetest: rank %d could not send %v to rank %d within %v", src, p, dst, n.timeout())
	}
	n.mu.Lock()
	tr := n.traffic[[2]int{src, dst}]
	if p.isFloat {
		tr.Floats++
		tr.FloatValues += len(p.floats)
	} else {
		tr.Ints++
		tr.IntValues += len(p.ints)
	}
	n.traffic[[2]int{src, dst}] = tr
	n.mu.Unlock()
	return nil
}

// recv takes the next message from src to dst, which must be want's kind and size.
func (n *Net) recv(src, dst int, want packet) (packet, error) {
	if err := n.check(src, dst); err != nil {
		return packet{}, err
	}
	if n.isCut(src, dst) {
		<-n.done
		return packet{}, fmt.Errorf("pipelinetest: rank %d receiving from rank %d: the net is closed", dst, src)
	}
	t := time.NewTimer(n.timeout())
	defer t.Stop()
	p, ok := n.takeBack(src, dst) // a message a failed pass received comes first again
	if !ok {
		select {
		case p = <-n.links[src][dst]:
		case <-n.done:
			return packet{}, fmt.Errorf("pipelinetest: rank %d receiving from rank %d: the net is closed", dst, src)
		case <-t.C:
			return packet{}, fmt.Errorf("pipelinetest: rank %d waited %v for %v from rank %d", dst, n.timeout(), want, src)
		}
	}
	if p.isFloat != want.isFloat || p.isFloat && (p.rows != want.rows || p.cols != want.cols) || !p.isFloat && len(p.ints) != len(want.ints) {
		return packet{}, fmt.Errorf("pipelinetest: rank %d expected %v from rank %d, and the next message on that link is %v: the ranks disagree on the protocol", dst, want, src, p)
	}
	return p, nil
}

// unrecv puts p back at the front of the link from src to dst: a pass that received it
// failed, and on MLX would not have received it.
func (n *Net) unrecv(src, dst int, p packet) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.back == nil {
		n.back = map[[2]int][]packet{}
	}
	k := [2]int{src, dst}
	n.back[k] = append([]packet{p}, n.back[k]...)
}

func (n *Net) takeBack(src, dst int) (packet, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := [2]int{src, dst}
	q := n.back[k]
	if len(q) == 0 {
		return packet{}, false
	}
	n.back[k] = q[1:]
	return q[0], true
}

// Wire is rank's end of the control channel (a pipeline.Wire, and a compute.Group).
func (n *Net) Wire(rank int) *Wire { return &Wire{net: n, rank: rank} }

// Wire is one rank's control channel over a Net.
type Wire struct {
	net  *Net
	rank int
}

func (w *Wire) Rank() int { return w.rank }
func (w *Wire) Size() int { return w.net.size }

// SendInts queues a copy of v for rank dst.
func (w *Wire) SendInts(v []int32, dst int) error {
	return w.net.send(w.rank, dst, packet{ints: append([]int32(nil), v...)})
}

// RecvInts takes the next message from rank src, which must be n int32s.
func (w *Wire) RecvInts(n, src int) ([]int32, error) {
	p, err := w.net.recv(src, w.rank, packet{ints: make([]int32, n)})
	return p.ints, err
}
