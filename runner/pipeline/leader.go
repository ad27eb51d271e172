package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
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
// that many int32s of payload (a forward pass's tokens, a model's directory). Every
// message but OpStop is answered by a status word that goes around the ring (rank 1
// starts it, each rank puts in its own failure, the last rank hands it to rank 0).
const (
	headerLen = 9
	magic     = 0x6d6c7867 // "mlxg"

	// OpForward runs a pass of model Model: payload its tokens; Seq names the
	// sequence, Start is the position of its first token (a worker whose caches hold
	// more truncates them: that is how a cancelled or rewound sequence reaches it), All
	// asks for every row's logits, FP32 for float32 caches. Layout, sent with a
	// sequence's first pass, describes every layer's cache (kvstore.Describe) as rank 0's
	// memory policy made it, so that each rank keeps its layers' KV as one process would.
	OpForward = 1
	// OpLoad loads a model as Model: payload its directory on rank 0; Start is the
	// context the server loads it for (the workers' memory policies plan for it).
	OpLoad = 2
	// OpUnload drops model Model.
	OpUnload = 3
	// OpStop ends the workers (no status).
	OpStop = 4
	// OpPing checks that every rank answers.
	OpPing = 5
	// OpHello tells the workers where rank 0 listens for their liveness connection:
	// payload its address.
	OpHello = 6
	// OpRestore restores a sequence's cached prefix on every rank from its own prefix
	// cache: payload the tokens (at most Start of them are wanted; rank 0 restored
	// Start), Layout as for OpForward. A worker that restores fewer answers statusShort.
	OpRestore = 7
	// OpSave saves the blocks of a sequence's tokens (payload) into each rank's prefix cache.
	OpSave = 8
	// OpEnd ends a sequence's prefix-cache session on each rank.
	OpEnd = 9
	// OpForwardBatch runs one batched pass of several sequences of model Model (Seq of
	// them): payload, per sequence, its id, start, token count and layout length, then
	// its tokens and its layout (as OpForward's). The logits are each sequence's last
	// row.
	OpForwardBatch = 10
)

// Status codes of the status round, the worst of all ranks.
const (
	statusOK     = 0
	statusShort  = 1 // a prefix restore got fewer positions than rank 0's
	statusFailed = 2
)

// Message is one control message.
type Message struct {
	Op      int32
	Model   int32
	Seq     int32
	Start   int32
	All     bool
	FP32    bool
	Hidden  bool // the last rank sends the head's input (the final normed hidden state) instead of the logits
	Payload []int32
	Layout  []int32
}

func (m Message) header() []int32 {
	h := make([]int32, headerLen)
	h[0], h[1], h[2], h[3], h[4], h[7], h[8] = magic, m.Op, int32(len(m.Payload)+len(m.Layout)), m.Seq, m.Start, m.Model, int32(len(m.Layout))
	if m.All {
		h[5] |= 1
	}
	if m.Hidden {
		h[5] |= 2
	}
	if m.FP32 {
		h[6] = 1
	}
	return h
}

// send sends m to the workers, ringing their doorbell first.
func (l *Leader) send(m Message) error {
	if l.Doorbell != nil {
		if err := l.Doorbell(); err != nil {
			return err
		}
	}
	return sendMessage(l.wire, m)
}

// sendMessage sends m to the next rank.
func sendMessage(w Wire, m Message) error {
	next := w.Rank() + 1
	if err := w.SendInts(m.header(), next); err != nil {
		return err
	}
	if len(m.Payload)+len(m.Layout) > 0 {
		return w.SendInts(append(append([]int32(nil), m.Payload...), m.Layout...), next)
	}
	return nil
}

// recvMessage receives the next message from the rank before and passes it on to the
// next rank, unless this is the last.
func recvMessage(w Wire) (Message, error) {
	r := w.Rank()
	h, err := w.RecvInts(headerLen, r-1)
	if err != nil {
		return Message{}, err
	}
	if h[0] != magic {
		return Message{}, fmt.Errorf("model: rank %d received a control message that is not mlxg's (%#x)", r, h[0])
	}
	m := Message{Op: h[1], Seq: h[3], Start: h[4], All: h[5]&1 != 0, Hidden: h[5]&2 != 0, FP32: h[6] == 1, Model: h[7]}
	if n := int(h[2]); n > 0 {
		if m.Payload, err = w.RecvInts(n, r-1); err != nil {
			return m, err
		}
		if k := int(h[8]); k > 0 && k <= n {
			m.Payload, m.Layout = m.Payload[:n-k], m.Payload[n-k:]
		}
	}
	if r < w.Size()-1 {
		if err := sendMessage(w, m); err != nil {
			return m, err
		}
	}
	return m, nil
}

// passStatus is a worker's part of the status round: code is this rank's outcome.
func passStatus(w Wire, code int32) error {
	r := w.Rank()
	st := []int32{code, int32(r)}
	if r > 1 {
		prev, err := w.RecvInts(2, r-1)
		if err != nil {
			return err
		}
		if prev[0] >= st[0] {
			st = prev
		}
	}
	return w.SendInts(st, (r+1)%w.Size())
}

// Ints and Name convert a string payload.
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

// ErrRankFailed is the error of a pass or load that a rank could not run.
var ErrRankFailed = errors.New("a pipeline rank failed")

// Leader is rank 0's side of the pipeline: it loads models on every rank and drives
// their passes. One message is in flight at a time, for all the models.
type Leader struct {
	wire Wire
	mu   sync.Mutex
	next int32
	// Timeout bounds one exchange with the workers (a pass, a load); 0: none. MLX's ring
	// has no timeout of its own: a rank that died leaves the transfer blocked.
	Timeout time.Duration
	// Doorbell, when set, is called before each message: it tells every worker that one
	// is coming (Cluster's liveness connections). MLX's ring waits for data by polling its
	// socket, so a worker blocked in a receive keeps a core busy; it waits for the
	// doorbell instead while idle.
	Doorbell func() error

	dmu    sync.Mutex
	broken error
	down   chan struct{}  // closed once broken
	hosts  []string       // each rank's address, for Ranks
	gone   map[int]bool   // ranks whose liveness connection closed
	ctx    map[string]int // the context each model directory is planned for (Plan)
}

// Plan is rank 0's memory-policy view of the model in dir: its share of shape (its
// layers and weights: StageShape), to plan its own KV with; numCtx is passed on to the
// workers when the model loads, for theirs.
func (l *Leader) Plan(dir string, shape kvstore.ModelShape, numCtx int) (kvstore.ModelShape, error) {
	stages, err := Split(len(shape.Layers), l.wire.Size())
	if err != nil {
		return shape, err
	}
	w, err := StageWeightBytes(dir, stages[0])
	if err != nil {
		return shape, err
	}
	l.dmu.Lock()
	if l.ctx == nil {
		l.ctx = map[string]int{}
	}
	if numCtx > 0 {
		l.ctx[dir] = numCtx
	}
	l.dmu.Unlock()
	return StageShape(shape, stages[0], w), nil
}

// SetHosts records the ranks' addresses (the hostfile's), for Ranks.
func (l *Leader) SetHosts(hosts []string) {
	l.dmu.Lock()
	l.hosts = hosts
	l.dmu.Unlock()
}

// RankGone records that rank r went away, and fails the pipeline with err.
func (l *Leader) RankGone(r int, err error) {
	l.dmu.Lock()
	if l.gone == nil {
		l.gone = map[int]bool{}
	}
	l.gone[r] = true
	l.dmu.Unlock()
	l.Fail(err)
}

// Ranks describes the ranks of m, a model loaded through l.
func (l *Leader) Ranks(m *model.Model) []model.RankInfo {
	stages, err := Split(m.Config.NumLayers, l.wire.Size())
	if err != nil {
		return nil
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	out := make([]model.RankInfo, len(stages))
	for r, s := range stages {
		ri := model.RankInfo{Rank: r, State: "ready", Layers: "head only"}
		if s.Hi > s.Lo {
			ri.Layers = fmt.Sprintf("%d-%d", s.Lo, s.Hi-1)
		}
		if r < len(l.hosts) {
			ri.Host = l.hosts[r]
		}
		switch {
		case l.gone[r]:
			ri.State = "gone"
		case l.broken != nil:
			ri.State = "stalled"
		}
		out[r] = ri
	}
	return out
}

// Ranks implements model.Executor: rank 0 describes every rank (a worker, none).
func (m *stageModel) Ranks() []model.RankInfo {
	if m.pipe == nil || m.pipe.leader == nil {
		return nil
	}
	return m.pipe.leader.Ranks(m.Model)
}

// NewLeader starts rank 0's side over w.
func NewLeader(w Wire) (*Leader, error) {
	if w.Rank() != 0 || w.Size() < 2 {
		return nil, fmt.Errorf("model: a pipeline leader is rank 0 of at least 2, not rank %d of %d", w.Rank(), w.Size())
	}
	return &Leader{wire: w, down: make(chan struct{})}, nil
}

// Size is the number of ranks.
func (l *Leader) Size() int { return l.wire.Size() }

// Fail marks the pipeline unusable (a rank died; the watchdog calls it): the exchange
// in flight and every later one fail with err.
func (l *Leader) Fail(err error) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.broken == nil {
		l.broken = fmt.Errorf("%w: %v; the model cannot run until the workers and the server are restarted", ErrRankFailed, err)
		close(l.down)
	}
}

// Broken returns the error that made the pipeline unusable, if any.
func (l *Leader) Broken() error {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	return l.broken
}

// exchange runs fn (a message and its transfers) unless the pipeline is broken,
// returning early with the reason if it breaks or the timeout passes meanwhile: fn is
// then left blocked in MLX, and the pipeline stays broken.
func (l *Leader) exchange(fn func() error) error {
	if err := l.Broken(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	var timeout <-chan time.Time
	if l.Timeout > 0 {
		t := time.NewTimer(l.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		return err
	case <-l.down:
		return l.Broken()
	case <-timeout:
		l.Fail(fmt.Errorf("the workers did not answer within %v", l.Timeout))
		return l.Broken()
	}
}

// pass is one forward pass over the pipeline: msg goes to the workers, stage runs rank 0's
// layers (logits, its own failure, and a transfer that broke), then the status round. err is
// a transfer failure (the pipeline is broken); failed is the rank that reported a failure
// of its own, -1 when none did.
func (l *Leader) pass(msg Message, stage func() ([]float32, error, error)) (logits []float32, passErr error, failed int, err error) {
	failed = -1
	err = l.exchange(func() error {
		if err := l.send(msg); err != nil {
			return err
		}
		var broke error
		if logits, passErr, broke = stage(); broke != nil {
			return broke
		}
		var err error
		failed, err = l.status()
		return err
	})
	return logits, passErr, failed, err
}

// status reads the status round's result: the rank that failed, or -1.
func (l *Leader) status() (int, error) {
	code, rank, err := l.statusCode()
	if err != nil || code != statusFailed {
		return -1, err
	}
	return rank, nil
}

func (l *Leader) statusCode() (code int32, rank int, err error) {
	st, err := l.wire.RecvInts(2, l.wire.Size()-1)
	if err != nil {
		return 0, 0, err
	}
	return st[0], int(st[1]), nil
}

// Ping checks that every rank answers.
func (l *Leader) Ping() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exchange(func() error {
		if err := l.send(Message{Op: OpPing}); err != nil {
			return err
		}
		_, err := l.status()
		return err
	})
}

// Hello hands the workers rank 0's liveness address (Worker.OnHello), and returns once
// every rank has acted on it.
func (l *Leader) Hello(addr string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	failed := -1
	err := l.exchange(func() error {
		if err := l.send(Message{Op: OpHello, Payload: Ints(addr)}); err != nil {
			return err
		}
		var err error
		failed, err = l.status()
		return err
	})
	if err == nil && failed >= 0 {
		err = fmt.Errorf("%w: rank %d could not reach rank 0 at %s (its log says why)", ErrRankFailed, failed, addr)
	}
	return err
}

// Stop ends the workers.
func (l *Leader) Stop() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exchange(func() error { return l.send(Message{Op: OpStop}) })
}

// Load loads the model in dir on every rank, each its stage, backend binding rank 0's.
// The workers find it at the same path, or under their own Hugging Face cache
// (ResolveModelDir). runner.LoadOptions.Pipeline makes the engine load through it.
func (l *Leader) Load(dir string, backend compute.Backend) (*model.Model, error) {
	cfg, err := model.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	stages, err := Split(cfg.NumLayers, l.wire.Size())
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.next++
	id := l.next
	failed := -1
	err = l.exchange(func() error {
		l.dmu.Lock()
		numCtx := l.ctx[dir]
		l.dmu.Unlock()
		if err := l.send(Message{Op: OpLoad, Model: id, Start: int32(numCtx), Payload: Ints(dir)}); err != nil {
			return err
		}
		var err error
		failed, err = l.status()
		return err
	})
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if failed >= 0 {
		l.unload(id)
		return nil, fmt.Errorf("%w: rank %d could not load %s (its log says why)", ErrRankFailed, failed, dir)
	}
	m, err := LoadStage(dir, backend, stages[0])
	if err != nil {
		l.unload(id)
		return nil, err
	}
	stageOf(m).pipe = &pipe{leader: l, id: id, seqs: map[*kvstore.Layer]int32{}, layout: map[int32][]int32{}}
	return m, nil
}

func (l *Leader) unload(id int32) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.exchange(func() error {
		if err := l.send(Message{Op: OpUnload, Model: id}); err != nil {
			return err
		}
		_, err := l.status()
		return err
	})
}

// pipe is a stage model's link to its pipeline.
type pipe struct {
	leader *Leader // rank 0
	id     int32
	seqs   map[*kvstore.Layer]int32 // rank 0: the sequence id of each caches list; leader.mu
	layout map[int32][]int32        // rank 0: each sequence's cache descriptions
	next   int32
	wire   Wire // a worker's
}

// seqID names a caches list to the workers (they keep their layers' caches per id),
// and returns the description of its layers' caches when the workers need it: on the
// sequence's first pass, and whenever it starts again from position 0. It describes
// the caches before stageCaches replaces other ranks' layers.
func (p *pipe) seqID(caches []kvstore.Layer) (int32, []int32) {
	k := &caches[0]
	id, ok := p.seqs[k]
	if !ok {
		if len(p.seqs) >= maxWorkerSeqs*4 {
			clear(p.seqs)
			clear(p.layout)
		}
		p.next++
		id = p.next
		p.seqs[k] = id
		var d []int32
		for _, c := range caches {
			d = append(d, kvstore.Describe(c)...)
		}
		p.layout[id] = d
		return id, d
	}
	if caches[0].Len() == 0 {
		return id, p.layout[id]
	}
	return id, nil
}

// maxWorkerSeqs is how many sequences' caches a worker keeps per model (the least
// recently used go first).
const maxWorkerSeqs = 16

// Close implements model.Executor: rank 0 tells the workers to drop the model.
func (m *stageModel) Close() {
	if m.pipe != nil && m.pipe.leader != nil {
		if err := m.pipe.leader.unload(m.pipe.id); err != nil {
			slog.Warn("unloading a model on the pipeline's workers", "err", err)
		}
	}
}

// Forward implements model.Executor on rank 0: it sends the pass to the workers, runs
// its layers, and returns the logits the last rank sends back once the status round
// says every rank ran.
func (m *stageModel) Forward(ctx context.Context, tokens []int32, caches []kvstore.Layer, all bool) ([]float32, error) {
	p := m.pipe
	if p == nil || p.leader == nil {
		return nil, fmt.Errorf("model: stage %v has no pipeline leader", m.stage)
	}
	l := p.leader
	if len(tokens) == 0 || len(caches) != m.Config.NumLayers {
		return nil, fmt.Errorf("model: a pass of %d tokens over %d layer caches for a model of %d layers", len(tokens), len(caches), m.Config.NumLayers)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seq, layout := p.seqID(caches) // as the policy made them: nil for the layers it left to other ranks
	if err := m.checkStage(tokens, caches); err != nil {
		return nil, err
	}
	start := caches[0].Len()
	msg := Message{Op: OpForward, Model: p.id, Seq: seq, Start: int32(start), All: all, Payload: tokens, Layout: layout}
	for _, c := range caches {
		if f, ok := c.(*kvstore.Full); ok {
			msg.FP32 = f.FP32()
			break
		}
	}
	inner := m.Backend().NewContext()
	abandoned := false
	defer func() {
		// A pass abandoned inside MLX (a rank died mid-transfer) holds the backend's
		// thread: closing its context would wait for it forever.
		if !abandoned {
			inner.Close()
		}
	}()
	_, msg.Hidden = inner.(model.HiddenSink)
	logits, passErr, failed, err := l.pass(msg, func() ([]float32, error, error) { return m.runStage(inner, msg, caches) })
	if err != nil {
		abandoned = true
		l.Fail(err)
		m.rewind(caches, start)
		return nil, l.Broken()
	}
	if passErr != nil {
		return nil, passErr
	}
	if failed >= 0 {
		m.rewind(caches, start)
		return nil, fmt.Errorf("%w: rank %d could not run its layers for this pass (its log says why)", ErrRankFailed, failed)
	}
	return logits, nil
}

// runStage runs the stage's pass and its transfers. A pass that fails before its
// transfers were evaluated still performs them (with zeros), so that the other ranks
// are not left waiting: passErr is its error. A failed transfer leaves the group
// unusable: broke.
func (m *stageModel) runStage(inner compute.Context, msg Message, caches []kvstore.Layer) (logits []float32, passErr, broke error) {
	s := m.stage
	tokens, all := msg.Payload, msg.All
	start := caches[0].Len()
	rows := len(tokens)
	if !all {
		rows = 1
	}
	comm, ok := compute.Ext[Comm](inner)
	if !ok {
		comm, ok = inner.(Comm)
	}
	if !ok {
		err := fmt.Errorf("model: the %s backend's context (%T) cannot send activations between ranks", m.Backend().Name(), inner)
		return nil, err, m.fillIn(len(tokens), rows, msg.Hidden)
	}
	c := &stageContext{inner: inner, comm: comm, st: s, hidden: msg.Hidden, vocab: m.Config.VocabSize, hiddenSize: m.Config.HiddenSize}
	out := m.Network().Forward(c, tokens, caches, !all)
	recorded := c.Err() == nil
	logits, err := c.Float32s(out)
	if err == nil {
		return logits, nil, nil
	}
	m.rewind(caches, start)
	if recorded {
		return nil, err, err
	}
	return nil, err, m.fillIn(len(tokens), rows, msg.Hidden)
}

// fillIn performs a stage's transfers with zeros: receive from the rank before (T ×
// hidden), send to the next (T × hidden, or the logits' rows × vocab to rank 0), and on
// rank 0 receive the logits.
func (m *stageModel) fillIn(T, rows int, want bool) error {
	s := m.stage
	c := m.Backend().NewContext()
	defer c.Close()
	comm, ok := compute.Ext[Comm](c)
	if !ok {
		return fmt.Errorf("the %s backend cannot send activations between ranks", m.Backend().Name())
	}
	hidden, vocab := m.Config.HiddenSize, m.Config.VocabSize
	// The residual crosses between ranks as T rows, except into a last rank that holds
	// only the head: that gets the rows the logits are for.
	in, outRows := T, T
	if s.Last() && s.Lo == s.Hi {
		in = rows
	}
	if !s.Last() && s.Hi == m.Config.NumLayers {
		outRows = rows
	}
	if !s.First() {
		if _, err := c.Float32s(comm.Recv(in, hidden, s.Rank-1)); err != nil {
			return err
		}
	}
	out := vocab
	if want {
		out = hidden
	}
	dst, r, k := s.Rank+1, outRows, hidden
	if s.Last() {
		dst, r, k = 0, rows, out
	}
	if _, err := c.Float32s(comm.Send(comm.Zeros(r, k), dst)); err != nil {
		return err
	}
	if s.First() {
		_, err := c.Float32s(comm.Recv(rows, out, s.Size-1))
		return err
	}
	return nil
}

// checkStage validates a pass's tokens and prepares its caches, as Forward does.
func (m *stageModel) checkStage(tokens []int32, caches []kvstore.Layer) error {
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
	if err := m.stageCaches(caches); err != nil {
		return err
	}
	return m.PrepareCaches(caches)
}

// Worker is a worker rank's side of the pipeline: it follows rank 0's messages,
// loading models' stages with Open and running their passes, until OpStop.
type Worker struct {
	Wire Wire
	// Open loads dir's stage s (LoadStage on the worker's backend; it may look for dir
	// under another path first).
	Open func(dir string, s Stage) (*model.Model, error)
	// Release, when set, is called with each model the worker closes (to release its
	// backend).
	Release func(m *model.Model)
	// Loaded, when set, is called with each model the worker loads and the context
	// rank 0 loaded it for (to set its backend's memory limits from this machine's plan).
	Loaded func(m *model.Model, numCtx int) error
	// OnHello, when set, is given rank 0's liveness address (OpHello).
	OnHello func(addr string) error
	// Doorbell, when set, blocks until rank 0 says a message is coming (see
	// Leader.Doorbell); it returns at once until there is a doorbell to wait for.
	Doorbell func() error
	// Prefix, when set, is this rank's prefix cache: its layers' blocks of the
	// sequences rank 0 saves, under the same chain of token blocks.
	Prefix *kvstore.PrefixCache
	// Caches, when set, makes a new sequence's caches for m (loaded from dir for a
	// context of numCtx) with this machine's memory policy: its layers' share
	// (StageShape). Layers rank 0 described win over it; nil: the network's own fp16 or
	// float32 caches.
	Caches func(m *model.Model, dir string, numCtx int) ([]kvstore.Layer, error)
	Log    *slog.Logger

	models map[int32]*workerModel
	tick   int
}

type workerModel struct {
	m        *stageModel
	dir      string
	numCtx   int
	identity string // the checkpoint's, for prefix-cache model keys
	seqs     map[int32]*workerSeq
}

type workerSeq struct {
	caches []kvstore.Layer
	used   int
	sess   *kvstore.Session // its prefix-cache session, between OpRestore and OpEnd
}

// Run serves rank 0's messages until OpStop (nil) or a failed transfer (its error:
// the group is unusable then).
func (w *Worker) Run() error {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	w.models = map[int32]*workerModel{}
	defer func() {
		for _, wm := range w.models {
			w.close(wm.m.Model)
		}
	}()
	for {
		if w.Doorbell != nil {
			if err := w.Doorbell(); err != nil {
				return err
			}
		}
		msg, err := recvMessage(w.Wire)
		if err != nil {
			return err
		}
		var failure error
		code := int32(statusOK)
		switch msg.Op {
		case OpStop:
			for _, wm := range w.models {
				for _, sq := range wm.seqs {
					if sq.sess != nil {
						sq.sess.End()
					}
				}
			}
			return nil
		case OpRestore:
			var short bool
			short, failure = w.restore(msg)
			if short {
				code = statusShort
			}
		case OpSave:
			if sq := w.seq(msg); sq != nil && sq.sess != nil {
				sq.sess.Save(msg.Payload)
			}
		case OpEnd:
			if sq := w.seq(msg); sq != nil && sq.sess != nil {
				sq.sess.End()
				sq.sess = nil
			}
		case OpPing:
		case OpHello:
			if w.OnHello != nil {
				failure = w.OnHello(Name(msg.Payload))
			}
		case OpLoad:
			failure = w.load(msg)
		case OpUnload:
			if wm := w.models[msg.Model]; wm != nil {
				for _, sq := range wm.seqs {
					if sq.sess != nil {
						sq.sess.End()
					}
				}
				w.close(wm.m.Model)
				delete(w.models, msg.Model)
				w.Log.Info("model unloaded", "model", msg.Model)
			}
		case OpForward:
			var broke error
			failure, broke = w.forward(msg)
			if broke != nil {
				return broke
			}
		case OpForwardBatch:
			var broke error
			failure, broke = w.forwardBatch(msg)
			if broke != nil {
				return broke
			}
		default:
			failure = fmt.Errorf("unknown control message %d", msg.Op)
		}
		if failure != nil {
			w.Log.Error("pipeline rank failed", "rank", w.Wire.Rank(), "op", msg.Op, "model", msg.Model, "err", failure)
			code = statusFailed
		}
		if err := passStatus(w.Wire, code); err != nil {
			return err
		}
	}
}

func (w *Worker) close(m *model.Model) {
	m.Close()
	if w.Release != nil {
		w.Release(m)
	}
}

func (w *Worker) load(msg Message) error {
	dir := Name(msg.Payload)
	cfg, err := model.ReadConfig(dir)
	if w.Open == nil {
		return fmt.Errorf("the worker cannot open models")
	}
	var stages []Stage
	if err == nil {
		stages, err = Split(cfg.NumLayers, w.Wire.Size())
	}
	var m *model.Model
	if err == nil {
		m, err = w.Open(dir, stages[w.Wire.Rank()])
	}
	if err != nil {
		return fmt.Errorf("loading %s: %w", dir, err)
	}
	sm := stageOf(m)
	if sm == nil {
		w.close(m)
		return fmt.Errorf("loading %s: Open did not load it as a pipeline stage (LoadStage)", dir)
	}
	sm.pipe = &pipe{id: msg.Model, wire: w.Wire}
	if w.Loaded != nil {
		if err := w.Loaded(m, int(msg.Start)); err != nil {
			w.close(m)
			return fmt.Errorf("loading %s: %w", dir, err)
		}
	}
	wm := &workerModel{m: sm, dir: m.Dir, numCtx: int(msg.Start), seqs: map[int32]*workerSeq{}}
	if w.Prefix != nil {
		if wm.identity, err = kvstore.CheckpointIdentity(m.Dir); err != nil {
			w.Log.Warn("prefix cache off for this model: its weights cannot be identified", "dir", m.Dir, "err", err)
		}
	}
	w.models[msg.Model] = wm
	w.Log.Info("model loaded", "model", msg.Model, "dir", dir, "stage", sm.stage.String(), "weights", m.WeightBytes())
	return nil
}

// forward runs one pass: failure is this rank's failure to run it (reported in the
// status round; the transfers were made with zeros), broke a failed transfer.
func (w *Worker) forward(msg Message) (failure, broke error) {
	wm := w.models[msg.Model]
	rows := len(msg.Payload)
	if !msg.All {
		rows = 1
	}
	fill := func(err error) (error, error) {
		if wm == nil {
			return err, fmt.Errorf("%v, and without the model it cannot take part in the pass", err)
		}
		return err, wm.m.fillIn(len(msg.Payload), rows, msg.Hidden)
	}
	if wm == nil {
		return fill(fmt.Errorf("model %d is not loaded here", msg.Model))
	}
	sq, err := w.seqFor(wm, msg)
	if err != nil {
		return fill(err)
	}
	wm.m.rewind(sq.caches, int(msg.Start))
	if err := wm.m.checkStage(msg.Payload, sq.caches); err != nil {
		return fill(err)
	}
	if n := sq.caches[0].Len(); n != int(msg.Start) {
		return fill(fmt.Errorf("its caches hold %d positions of sequence %d, the pass starts at %d", n, msg.Seq, msg.Start))
	}
	inner := wm.m.Backend().NewContext()
	defer inner.Close()
	_, passErr, broke := wm.m.runStage(inner, msg, sq.caches)
	return passErr, broke
}

// newCaches makes a sequence's caches on a worker: its memory policy's (Caches), else
// the network's own, with the layers of this stage that rank 0 described made as it
// described them.
func (w *Worker) newCaches(wm *workerModel, msg Message) ([]kvstore.Layer, error) {
	var caches []kvstore.Layer
	var err error
	if w.Caches != nil && !msg.FP32 {
		caches, err = w.Caches(wm.m.Model, wm.dir, wm.numCtx)
		if err == nil {
			err = wm.m.FillCaches(caches)
		}
	} else {
		caches, err = wm.m.NewCaches(msg.FP32)
	}
	if err != nil {
		return nil, err
	}
	return wm.m.stageCachesFrom(caches, msg.Layout)
}

// stageCachesFrom makes the layers of this stage that rank 0 described (its memory
// policy's kinds and specs) as described, in caches.
func (m *stageModel) stageCachesFrom(caches []kvstore.Layer, layout []int32) ([]kvstore.Layer, error) {
	n := m.Config.NumLayers
	if len(layout) != n*kvstore.DescLen {
		return nil, fmt.Errorf("a cache layout of %d values for %d layers", len(layout), n)
	}
	for i := m.stage.Lo; i < m.stage.Hi; i++ {
		c, err := kvstore.NewDescribed(layout[i*kvstore.DescLen : (i+1)*kvstore.DescLen])
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		if c != nil {
			caches[i] = c
		}
	}
	return caches, m.stageCaches(caches)
}

// seq is msg's sequence, if this worker has it.
func (w *Worker) seq(msg Message) *workerSeq {
	if wm := w.models[msg.Model]; wm != nil {
		return wm.seqs[msg.Seq]
	}
	return nil
}

// seqFor returns msg's sequence, making its caches (as msg.Layout describes) when it
// is new here; the least recently used sequence goes when there are too many.
func (w *Worker) seqFor(wm *workerModel, msg Message) (*workerSeq, error) {
	w.tick++
	sq := wm.seqs[msg.Seq]
	if sq == nil {
		if len(wm.seqs) >= maxWorkerSeqs {
			var old int32
			oldest := w.tick
			for id, q := range wm.seqs {
				if q.used < oldest {
					old, oldest = id, q.used
				}
			}
			if q := wm.seqs[old]; q.sess != nil {
				q.sess.End()
			}
			delete(wm.seqs, old)
		}
		if msg.Layout == nil {
			return nil, fmt.Errorf("sequence %d is not known here (dropped as least recently used?) and came without its cache layout", msg.Seq)
		}
		caches, err := w.newCaches(wm, msg)
		if err != nil {
			return nil, err
		}
		sq = &workerSeq{caches: caches}
		wm.seqs[msg.Seq] = sq
	}
	sq.used = w.tick
	return sq, nil
}

// restore begins msg's sequence's prefix-cache session on this rank and restores up
// to msg.Start positions of the tokens: short when it got fewer.
func (w *Worker) restore(msg Message) (short bool, err error) {
	wm := w.models[msg.Model]
	if wm == nil {
		return false, fmt.Errorf("model %d is not loaded here", msg.Model)
	}
	if w.Prefix == nil || wm.identity == "" {
		return msg.Start > 0, nil
	}
	sq, err := w.seqFor(wm, msg)
	if err != nil {
		return false, err
	}
	wm.m.rewind(sq.caches, 0)
	if sq.sess != nil {
		sq.sess.End()
		sq.sess = nil
	}
	seq := wm.m.PrefixSeq(sq.caches)
	key, err := kvstore.NewModelKey(wm.identity, seq)
	if err != nil {
		return msg.Start > 0, nil // this rank's caches cannot be shared: a miss
	}
	sq.sess = w.Prefix.Begin(key, seq)
	n := int(msg.Start)
	if n > len(msg.Payload) {
		n = len(msg.Payload)
	}
	got := 0
	if n > 0 {
		got = sq.sess.Restore(msg.Payload[:n])
	}
	m := wm.m
	m.setOthers(sq.caches, got)
	return got < n, nil
}

// setOthers puts the layers other ranks run at position n: their caches only count
// positions (a skipped layer's counter, or a recurrent state this rank never
// computes), so any position is theirs to take.
func (m *stageModel) setOthers(caches []kvstore.Layer, n int) {
	for i, c := range caches {
		if i >= m.stage.Lo && i < m.stage.Hi {
			continue
		}
		switch c := c.(type) {
		case *skipped:
			c.n = n
		case model.RecurrentLayer:
			r := c.RecurrentState()
			r.Truncate(0)
			r.Advance(n)
		}
	}
}

// rewind truncates this stage's own layers to n positions (those that hold more) and
// puts the others at n.
func (m *stageModel) rewind(caches []kvstore.Layer, n int) {
	for i, c := range caches {
		if c != nil && i >= m.stage.Lo && i < m.stage.Hi && c.Len() > n {
			c.Truncate(n)
		}
	}
	m.setOthers(caches, n)
}

// PrefixRestore implements model.Executor: it makes the workers restore the same
// prefix rank 0 restored (n positions of tokens) from their own prefix caches, and
// returns the positions every rank holds: n, or 0 when a worker had less (rank 0's
// caches are then emptied, and the prompt is computed again on every rank).
func (m *stageModel) PrefixRestore(caches []kvstore.Layer, tokens []int32, n int) (int, error) {
	p := m.pipe
	if p == nil || p.leader == nil {
		return n, nil
	}
	l := p.leader
	l.mu.Lock()
	defer l.mu.Unlock()
	seq, layout := p.seqID(caches)
	if layout == nil {
		layout = p.layout[seq] // the workers may not know the sequence yet
	}
	var code int32
	err := l.exchange(func() error {
		if err := l.send(Message{Op: OpRestore, Model: p.id, Seq: seq, Start: int32(n), Payload: tokens, Layout: layout}); err != nil {
			return err
		}
		var err error
		code, _, err = l.statusCode()
		return err
	})
	if err != nil {
		l.Fail(err)
		return 0, l.Broken()
	}
	if code != statusOK && n > 0 {
		m.rewind(caches, 0)
		return 0, nil
	}
	m.setOthers(caches, n)
	return n, nil
}

// PrefixSave makes the workers save their layers' blocks of tokens, as rank 0 just did.
func (m *stageModel) PrefixSave(caches []kvstore.Layer, tokens []int32) {
	m.prefixMessage(caches, Message{Op: OpSave, Payload: tokens})
}

// PrefixEnd ends the workers' prefix-cache session of the sequence.
func (m *stageModel) PrefixEnd(caches []kvstore.Layer) {
	m.prefixMessage(caches, Message{Op: OpEnd})
}

func (m *stageModel) prefixMessage(caches []kvstore.Layer, msg Message) {
	p := m.pipe
	if p == nil || p.leader == nil || len(caches) == 0 {
		return
	}
	l := p.leader
	l.mu.Lock()
	defer l.mu.Unlock()
	msg.Model = p.id
	msg.Seq, _ = p.seqID(caches)
	err := l.exchange(func() error {
		if err := l.send(msg); err != nil {
			return err
		}
		_, _, err := l.statusCode()
		return err
	})
	if err != nil {
		l.Fail(err)
	}
}

// Batched implements model.Executor: the stage runs several sequences in one pass when
// its architecture and backend can.
func (m *stageModel) Batched() bool {
	if _, ok := m.batchNetwork(); !ok {
		return false
	}
	return compute.Supports[compute.BatchContext](m.Backend(), "batched passes") == nil
}

func (m *stageModel) batchNetwork() (model.BatchNetwork, bool) {
	bn, ok := m.Network().(model.BatchNetwork)
	return bn, ok
}

// ForwardBatch implements model.Executor on rank 0: one batched pass of the sequences
// on every rank (OpForwardBatch), each sequence's last logits back.
func (m *stageModel) ForwardBatch(ctx context.Context, seqs []model.Sequence) []model.Result {
	out := make([]model.Result, len(seqs))
	bn, ok := m.batchNetwork()
	if len(seqs) < 2 || !ok {
		for i, s := range seqs {
			out[i].Logits, out[i].Err = m.Forward(ctx, s.Tokens, s.Caches, false)
		}
		return out
	}
	p := m.pipe
	if p == nil || p.leader == nil {
		for i := range out {
			out[i].Err = fmt.Errorf("model: stage %v has no pipeline leader", m.stage)
		}
		return out
	}
	if err := ctx.Err(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	l := p.leader
	l.mu.Lock()
	defer l.mu.Unlock()
	var run []int
	var part []model.Sequence
	var payload []int32
	starts := make([]int, len(seqs))
	fp32 := false
	for i, s := range seqs {
		if len(s.Tokens) == 0 || len(s.Caches) != m.Config.NumLayers {
			out[i].Err = fmt.Errorf("model: a pass of %d tokens over %d layer caches for a model of %d layers", len(s.Tokens), len(s.Caches), m.Config.NumLayers)
			continue
		}
		id, layout := p.seqID(s.Caches)
		if err := m.checkStage(s.Tokens, s.Caches); err != nil {
			out[i].Err = err
			continue
		}
		starts[i] = s.Caches[0].Len()
		for _, c := range s.Caches {
			if f, ok := c.(*kvstore.Full); ok {
				fp32 = f.FP32()
				break
			}
		}
		payload = append(payload, id, int32(starts[i]), int32(len(s.Tokens)), int32(len(layout)))
		payload = append(append(payload, s.Tokens...), layout...)
		run = append(run, i)
		part = append(part, s)
	}
	if len(run) == 0 {
		return out
	}
	msg := Message{Op: OpForwardBatch, Model: p.id, Seq: int32(len(run)), FP32: fp32, Payload: payload}
	inner := m.Backend().NewContext()
	abandoned := false
	defer func() {
		if !abandoned {
			inner.Close()
		}
	}()
	logits, passErr, failed, err := l.pass(msg, func() ([]float32, error, error) { return m.runBatchStage(inner, bn, part) })
	switch {
	case err != nil:
		abandoned = true
		l.Fail(err)
		err = l.Broken()
	case passErr != nil:
		err = passErr
	case failed >= 0:
		err = fmt.Errorf("%w: rank %d could not run its layers for this pass (its log says why)", ErrRankFailed, failed)
	}
	vocab := m.Config.VocabSize
	if err == nil && len(logits) != vocab*len(run) {
		err = fmt.Errorf("model: a batched pass of %d sequences returned %d logits", len(run), len(logits))
	}
	for j, i := range run {
		if err != nil {
			m.rewind(seqs[i].Caches, starts[i])
			out[i].Err = err
			continue
		}
		out[i].Logits = logits[j*vocab : (j+1)*vocab : (j+1)*vocab]
	}
	return out
}

// runBatchStage is runStage for a batched pass of part (each sequence's last row).
func (m *stageModel) runBatchStage(inner compute.Context, bn model.BatchNetwork, part []model.Sequence) (logits []float32, passErr, broke error) {
	rows := make([]int, len(part))
	starts := make([]int, len(part))
	total := 0
	for i, s := range part {
		rows[i], starts[i] = len(s.Tokens), s.Caches[0].Len()
		total += rows[i]
	}
	rewind := func() {
		for i, s := range part {
			m.rewind(s.Caches, starts[i])
		}
	}
	comm, ok := compute.Ext[Comm](inner)
	if !ok {
		err := fmt.Errorf("model: the %s backend's context (%T) cannot send activations between ranks", m.Backend().Name(), inner)
		return nil, err, m.fillIn(total, len(part), false)
	}
	c := &stageContext{inner: inner, comm: comm, st: m.stage, vocab: m.Config.VocabSize, hiddenSize: m.Config.HiddenSize}
	c.Segments(rows)
	out := bn.ForwardBatch(c, model.NewBatch(part, true))
	recorded := c.Err() == nil
	logits, err := c.Float32s(out)
	if err == nil {
		return logits, nil, nil
	}
	rewind()
	if recorded {
		return nil, err, err
	}
	return nil, err, m.fillIn(total, len(part), false)
}

// forwardBatch runs one batched pass on a worker (OpForwardBatch).
func (w *Worker) forwardBatch(msg Message) (failure, broke error) {
	wm := w.models[msg.Model]
	n := int(msg.Seq)
	var part []model.Sequence
	total := 0
	var bad error
	pl := msg.Payload
	for range n {
		if len(pl) < 4 {
			bad = fmt.Errorf("a batched pass's payload ends early")
			break
		}
		id, start, T, k := pl[0], int(pl[1]), int(pl[2]), int(pl[3])
		pl = pl[4:]
		if T < 0 || k < 0 || len(pl) < T+k {
			bad = fmt.Errorf("a batched pass's payload ends early")
			break
		}
		tokens, layout := pl[:T], pl[T:T+k]
		pl = pl[T+k:]
		total += T
		if bad != nil || wm == nil {
			continue
		}
		if k == 0 {
			layout = nil
		}
		sq, err := w.seqFor(wm, Message{Seq: id, Layout: layout, FP32: msg.FP32})
		if err != nil {
			bad = err
			continue
		}
		wm.m.rewind(sq.caches, start)
		if err := wm.m.checkStage(tokens, sq.caches); err != nil {
			bad = err
			continue
		}
		if got := sq.caches[0].Len(); got != start {
			bad = fmt.Errorf("its caches hold %d positions of sequence %d, the pass starts at %d", got, id, start)
			continue
		}
		part = append(part, model.Sequence{Tokens: tokens, Caches: sq.caches})
	}
	if wm == nil {
		return fmt.Errorf("model %d is not loaded here", msg.Model), fmt.Errorf("model %d is not loaded here, and without it this rank cannot take part in the pass", msg.Model)
	}
	bn, ok := wm.m.batchNetwork()
	if bad == nil && !ok {
		bad = fmt.Errorf("the model runs no batched passes")
	}
	if bad != nil {
		return bad, wm.m.fillIn(total, n, false)
	}
	inner := wm.m.Backend().NewContext()
	defer inner.Close()
	_, passErr, broke := wm.m.runBatchStage(inner, bn, part)
	return passErr, broke
}
