package model

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mlxg/mlxg/kvstore"
)

// Wire is the pipeline's control channel between neighbouring ranks: small int32
// messages over the same MLX group the activations use (metal.Group).
type Wire interface {
	Rank() int
	Size() int
	SendInts(v []int32, dst int) error
	RecvInts(n, src int) ([]int32, error)
}

// The control protocol. Rank 0 sends each message to rank 1, which passes it on to
// rank 2 before acting on it, and so on: the ring backend connects neighbours only.
// A message is a header of headerLen int32s, then, when its length word is non-zero,
// that many int32s of payload (a forward pass's tokens, a model's name).
const (
	headerLen = 8
	magic     = 0x6d6c7867 // "mlxg"

	// OpForward runs a pass: payload tokens; Seq, Start (the position of the first
	// token: a worker whose caches hold more truncates them, which is how a cancelled or
	// rewound sequence reaches it), All (1: every row's logits), FP32 caches.
	OpForward = 1
	// OpLoad loads a model: payload its name (bytes, one per int32), Arg the number of
	// ranks' stages.
	OpLoad = 2
	// OpUnload drops the model.
	OpUnload = 3
	// OpStop ends the workers.
	OpStop = 4
	// OpPing checks that every rank answers.
	OpPing = 5
)

// Message is one control message.
type Message struct {
	Op      int32
	Seq     int32
	Start   int32
	All     bool
	FP32    bool
	Payload []int32
}

func (m Message) header() []int32 {
	h := make([]int32, headerLen)
	h[0], h[1], h[2], h[3], h[4] = magic, m.Op, int32(len(m.Payload)), m.Seq, m.Start
	if m.All {
		h[5] = 1
	}
	if m.FP32 {
		h[6] = 1
	}
	return h
}

// SendMessage sends m from rank 0 to rank 1 (and on, through the workers).
func SendMessage(w Wire, m Message) error {
	if err := w.SendInts(m.header(), 1); err != nil {
		return err
	}
	if len(m.Payload) > 0 {
		return w.SendInts(m.Payload, 1)
	}
	return nil
}

// RecvMessage receives the next message from the rank before and passes it on to the
// next rank, unless this is the last.
func RecvMessage(w Wire) (Message, error) {
	r := w.Rank()
	h, err := w.RecvInts(headerLen, r-1)
	if err != nil {
		return Message{}, err
	}
	if h[0] != magic {
		return Message{}, fmt.Errorf("model: rank %d received a control message that is not mlxg's (%#x)", r, h[0])
	}
	m := Message{Op: h[1], Seq: h[3], Start: h[4], All: h[5] == 1, FP32: h[6] == 1}
	if n := int(h[2]); n > 0 {
		if m.Payload, err = w.RecvInts(n, r-1); err != nil {
			return m, err
		}
	}
	if r < w.Size()-1 {
		if err := SendMessage(relay{w}, m); err != nil {
			return m, err
		}
	}
	return m, nil
}

// relay sends to the next rank instead of rank 1.
type relay struct{ Wire }

func (r relay) SendInts(v []int32, _ int) error { return r.Wire.SendInts(v, r.Rank()+1) }

// Name and Ints convert a string payload.
func Ints(s string) []int32 {
	out := make([]int32, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int32(s[i])
	}
	return out
}

func Name(v []int32) string {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return string(b)
}

// ErrRankFailed is the error of a pass that a worker could not run.
var ErrRankFailed = errors.New("a pipeline rank failed")

// pipe is the state a stage model keeps for its pipeline.
type pipe struct {
	mu     sync.Mutex
	wire   Wire
	seqs   map[*kvstore.Layer]int32 // rank 0: the sequence id of each caches list
	next   int32
	broken error // set once the group is unusable (a transfer failed)
}

// Attach makes m, a stage loaded with LoadStage, run its passes over w: rank 0's
// Forward then drives the workers, which run Work.
func (m *Model) Attach(w Wire) error {
	if m.stage == nil {
		return fmt.Errorf("model: Attach on a model that is not a pipeline stage")
	}
	if w.Rank() != m.stage.Rank || w.Size() != m.stage.Size {
		return fmt.Errorf("model: stage %v on rank %d of %d", m.stage, w.Rank(), w.Size())
	}
	m.pipe = &pipe{wire: w, seqs: map[*kvstore.Layer]int32{}}
	return nil
}

// Broken returns the error that made the pipeline unusable, if any.
func (m *Model) Broken() error {
	if m.pipe == nil {
		return nil
	}
	m.pipe.mu.Lock()
	defer m.pipe.mu.Unlock()
	return m.pipe.broken
}

func (p *pipe) fail(err error) error {
	if p.broken == nil {
		p.broken = fmt.Errorf("%w: %v; restart the workers and the server", ErrRankFailed, err)
	}
	return p.broken
}

// seqID names a caches list to the workers (they keep their layers' caches per id).
func (p *pipe) seqID(caches []kvstore.Layer) int32 {
	k := &caches[0]
	id, ok := p.seqs[k]
	if !ok {
		if len(p.seqs) >= maxWorkerSeqs*4 {
			clear(p.seqs)
		}
		p.next++
		id = p.next
		p.seqs[k] = id
	}
	return id
}

// maxWorkerSeqs is how many sequences' caches a worker keeps (least recently used go).
const maxWorkerSeqs = 16

// forwardStage is Forward for a pipeline stage. On rank 0 it sends the pass to the
// workers, runs its layers, and returns the logits the last rank sends back, after
// the workers' status says every rank ran.
func (m *Model) forwardStage(ctx context.Context, tokens []int32, caches []kvstore.Layer, all bool) ([]float32, error) {
	p := m.pipe
	if p == nil {
		return nil, fmt.Errorf("model: stage %v is not attached to a group", m.stage)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return nil, p.broken
	}
	if err := m.checkStage(tokens, caches); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := m.StageCaches(caches); err != nil {
		return nil, err
	}
	start := caches[0].Len()
	msg := Message{Op: OpForward, Seq: p.seqID(caches), Start: int32(start), All: all, Payload: tokens}
	for _, c := range caches {
		if f, ok := c.(*kvstore.Full); ok {
			msg.FP32 = f.FP32()
			break
		}
	}
	if err := SendMessage(p.wire, msg); err != nil {
		return nil, p.fail(err)
	}
	logits, err := m.runStage(tokens, caches, all)
	if p.broken != nil {
		return nil, p.broken
	}
	st, serr := p.wire.RecvInts(2, m.stage.Size-1)
	if serr != nil {
		return nil, p.fail(serr)
	}
	if err != nil {
		return nil, err
	}
	if st[0] != 0 {
		truncate(caches, start)
		return nil, fmt.Errorf("%w: rank %d could not run its layers for this pass (its log says why)", ErrRankFailed, st[1])
	}
	return logits, nil
}

// runStage runs the stage's pass and its transfers. A pass that fails before its
// transfers were evaluated still performs them (with zeros), so that the other ranks
// are not left waiting; a failed transfer breaks the pipeline.
func (m *Model) runStage(tokens []int32, caches []kvstore.Layer, all bool) ([]float32, error) {
	s, p := *m.stage, m.pipe
	start := caches[0].Len()
	inner := m.backend.NewContext()
	defer inner.Close()
	comm, ok := inner.(Comm)
	if !ok {
		return nil, p.fail(fmt.Errorf("the %s backend cannot send activations between ranks", m.backend.Name()))
	}
	c := &stageContext{inner: inner, comm: comm, st: s}
	out := m.net.Forward(c, tokens, caches, !all)
	recorded := c.Err() == nil
	logits, err := c.Float32s(out)
	if err == nil {
		return logits, nil
	}
	truncate(caches, start)
	if !recorded {
		// Nothing was transferred: take part with zeros.
		rows := len(tokens)
		if !all {
			rows = 1
		}
		if ferr := m.fillIn(len(tokens), rows); ferr != nil {
			return nil, p.fail(ferr)
		}
		return nil, err
	}
	return nil, p.fail(err)
}

// fillIn performs a stage's transfers with zeros: receive from the rank before (T ×
// hidden), send to the next (T × hidden, or the logits' rows × vocab to rank 0), and on
// rank 0 receive the logits.
func (m *Model) fillIn(T, rows int) error {
	s := *m.stage
	c := m.backend.NewContext()
	defer c.Close()
	comm := c.(Comm)
	hidden, vocab := m.Config.HiddenSize, m.Config.VocabSize
	if !s.First() {
		if _, err := c.Float32s(comm.Recv(T, hidden, s.Rank-1)); err != nil {
			return err
		}
	}
	dst, r, k := s.Rank+1, T, hidden
	if s.Last() {
		dst, r, k = 0, rows, vocab
	}
	zeros := comm.Zeros(r, k)
	if _, err := c.Float32s(comm.Send(zeros, dst)); err != nil {
		return err
	}
	if s.First() {
		_, err := c.Float32s(comm.Recv(rows, vocab, s.Size-1))
		return err
	}
	return nil
}

func truncate(caches []kvstore.Layer, n int) {
	for _, l := range caches {
		if l != nil && l.Len() > n {
			l.Truncate(n)
		}
	}
}

// Work runs a worker rank's side of the pipeline for m: it follows rank 0's passes
// until a message that is not a pass comes, which it returns to the caller (to load
// another model, or stop).
func (m *Model) Work(w Wire) (Message, error) {
	if err := m.Attach(w); err != nil {
		return Message{}, err
	}
	s := *m.stage
	type seq struct {
		caches []kvstore.Layer
		used   int
	}
	seqs := map[int32]*seq{}
	tick := 0
	for {
		msg, err := RecvMessage(w)
		if err != nil {
			return msg, err
		}
		if msg.Op != OpForward {
			return msg, nil
		}
		tick++
		sq := seqs[msg.Seq]
		status := int32(0)
		var runErr error
		if sq == nil {
			if len(seqs) >= maxWorkerSeqs {
				var old int32
				oldest := tick
				for id, q := range seqs {
					if q.used < oldest {
						old, oldest = id, q.used
					}
				}
				delete(seqs, old)
			}
			caches, err := m.NewCaches(msg.FP32)
			if err == nil {
				err = m.StageCaches(caches)
			}
			if err != nil {
				runErr = err
			} else {
				sq = &seq{caches: caches}
				seqs[msg.Seq] = sq
			}
		}
		if sq != nil {
			sq.used = tick
			if n := sq.caches[0].Len(); n > int(msg.Start) {
				truncate(sq.caches, int(msg.Start))
			}
			if n := sq.caches[0].Len(); n != int(msg.Start) {
				runErr = fmt.Errorf("its caches hold %d positions, the pass starts at %d", n, msg.Start)
			} else {
				runErr = m.checkStage(msg.Payload, sq.caches)
			}
		}
		if runErr == nil {
			_, runErr = m.runStage(msg.Payload, sq.caches, msg.All)
		} else {
			rows := len(msg.Payload)
			if !msg.All {
				rows = 1
			}
			if err := m.fillIn(len(msg.Payload), rows); err != nil {
				return msg, err
			}
		}
		if runErr != nil {
			slog.Error("pipeline pass failed", "stage", s.String(), "seq", msg.Seq, "err", runErr)
			status = 1
			if m.Broken() != nil {
				return msg, m.Broken()
			}
		}
		// The status word goes around the ring: rank 1 starts it, each rank adds its own
		// failure, the last hands it to rank 0.
		st := []int32{status, 0}
		if status != 0 {
			st[1] = int32(s.Rank)
		}
		if s.Rank > 1 {
			prev, err := w.RecvInts(2, s.Rank-1)
			if err != nil {
				return msg, err
			}
			if prev[0] != 0 {
				st = prev
			}
		}
		if err := w.SendInts(st, (s.Rank+1)%s.Size); err != nil {
			return msg, err
		}
	}
}

// checkStage validates a pass's tokens and prepares its caches, as Forward does.
func (m *Model) checkStage(tokens []int32, caches []kvstore.Layer) error {
	if len(tokens) == 0 {
		return fmt.Errorf("model: Forward with no tokens")
	}
	if len(caches) != m.Config.NumLayers {
		return fmt.Errorf("model: %d layer caches for a model of %d layers", len(caches), m.Config.NumLayers)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= m.Config.VocabSize {
			return fmt.Errorf("model: token %d (at %d) is outside the vocabulary of %d", id, i, m.Config.VocabSize)
		}
	}
	if err := m.StageCaches(caches); err != nil {
		return err
	}
	return m.prepareCaches(caches)
}
