package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

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
	cfg, err := model.ReadConfig(dir)
	if err != nil {
		return shape, err
	}
	stages, err := SplitModel(cfg, l.wire.Size())
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
	stages, err := SplitModel(m.Config, l.wire.Size())
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

// send sends m to the workers, ringing their doorbell first.
func (l *Leader) send(m Message) error {
	if l.Doorbell != nil {
		if err := l.Doorbell(); err != nil {
			return err
		}
	}
	return sendMessage(l.wire, m)
}

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
// of its own (rank -1 when none did), with its reason.
func (l *Leader) pass(msg Message, stage func() ([]float32, error, error)) (logits []float32, passErr error, failed status, err error) {
	failed.rank = -1
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

// status reads the status round's result: the rank that failed and why, rank -1 when
// none did.
func (l *Leader) status() (status, error) {
	st, err := l.statusCode()
	if err != nil || st.code != statusFailed {
		return status{rank: -1}, err
	}
	return st, nil
}

func (l *Leader) statusCode() (status, error) {
	return recvStatus(l.wire, l.wire.Size()-1)
}

// reason is a failed rank's error as rank 0 reports it: ErrRankFailed, the rank, what
// it could not do, and its own words.
func (st status) reason(what string) error {
	why := st.text
	if why == "" {
		why = "its log says why"
	}
	return fmt.Errorf("%w: rank %d could not %s: %s", ErrRankFailed, st.rank, what, why)
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
	failed := status{rank: -1}
	err := l.exchange(func() error {
		if err := l.send(Message{Op: OpHello, Payload: Ints(addr)}); err != nil {
			return err
		}
		var err error
		failed, err = l.status()
		return err
	})
	if err == nil && failed.rank >= 0 {
		err = failed.reason("reach rank 0 at " + addr)
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
	stages, err := SplitModel(cfg, l.wire.Size())
	if err != nil {
		return nil, err
	}
	// Rank 0's stage first: a model that cannot be split (or that rank 0 cannot load)
	// fails with its own error, before any worker loads it.
	m, err := LoadStage(dir, backend, stages[0])
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.next++
	id := l.next
	failed := status{rank: -1}
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
		m.Close()
		return nil, err
	}
	if failed.rank >= 0 {
		m.Close()
		l.unload(id)
		return nil, failed.reason("load " + dir)
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
	if err := l.Broken(); err != nil {
		return nil, err // before touching the caches, which an abandoned pass may hold
	}
	seq, layout := p.seqID(caches) // as the policy made them: nil for the layers it left to other ranks
	if err := m.checkStage(tokens, caches); err != nil {
		return nil, err
	}
	start := caches[0].Len()
	msg := Message{Op: OpForward, Model: p.id, Seq: seq, Start: int32(start), All: all, Payload: tokens, Layout: layout}
	if md := model.MediaOf(caches); md != nil {
		msg.Media = mediaPlaces(md)
	}
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
		// The pass is left blocked on a transfer that will not complete: it keeps its
		// context and the caches it is writing (the pipeline never runs again).
		abandoned = true
		l.Fail(err)
		return nil, l.Broken()
	}
	if passErr != nil {
		return nil, passErr
	}
	if failed.rank >= 0 {
		m.rewind(caches, start)
		return nil, failed.reason("run its layers for this pass")
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
	c := &stageContext{inner: inner, comm: comm, st: s, hidden: msg.Hidden, vocab: m.Config.VocabSize, hiddenSize: m.Config.HiddenSize, layers: m.Config.NumLayers}
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
	// only the head: that gets the rows the logits are for. Into a rank that runs
	// layers, what the network carries goes beside it (stageContext.withWeights).
	in, outRows := T, T
	inCols, outCols := hidden, hidden
	if k := carriedCols(m.Model); k > 0 {
		if s.Lo < m.Config.NumLayers {
			inCols += k
		}
		if s.Hi < m.Config.NumLayers {
			outCols += k
		}
	}
	if s.Last() && s.Lo == s.Hi {
		in = rows
	}
	if !s.Last() && s.Hi == m.Config.NumLayers {
		outRows = rows
	}
	if !s.First() {
		if _, err := c.Float32s(comm.Recv(in, inCols, s.Rank-1)); err != nil {
			return err
		}
	}
	out := vocab
	if want {
		out = hidden
	}
	dst, r, k := s.Rank+1, outRows, outCols
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
	var md *model.Media
	for i, id := range tokens {
		if id >= 0 && int(id) < m.Config.VocabSize {
			continue
		}
		if id >= model.MediaBase {
			if md == nil {
				md = model.MediaOf(caches)
			}
			if md != nil {
				continue // an image's row (rank 0 embeds its features)
			}
		}
		return fmt.Errorf("model: token %d (at %d) is outside the vocabulary of %d", id, i, m.Config.VocabSize)
	}
	if err := m.stageCaches(caches); err != nil {
		return err
	}
	return m.PrepareCaches(caches)
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
	if err := l.Broken(); err != nil {
		return 0, err
	}
	seq, layout := p.seqID(caches)
	if layout == nil {
		layout = p.layout[seq] // the workers may not know the sequence yet
	}
	var st status
	err := l.exchange(func() error {
		if err := l.send(Message{Op: OpRestore, Model: p.id, Seq: seq, Start: int32(n), Payload: tokens, Layout: layout}); err != nil {
			return err
		}
		var err error
		st, err = l.statusCode()
		return err
	})
	if err != nil {
		l.Fail(err)
		return 0, l.Broken()
	}
	if st.code != statusOK && n > 0 {
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
	if l.Broken() != nil {
		return
	}
	msg.Model = p.id
	msg.Seq, _ = p.seqID(caches)
	err := l.exchange(func() error {
		if err := l.send(msg); err != nil {
			return err
		}
		_, err := l.statusCode()
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
	if err := l.Broken(); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	var run []int
	var part []model.Sequence
	var payload, media []int32
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
		md := model.MediaOf(s.Caches)
		if md != nil && media == nil {
			media = slices.Repeat([]int32{0}, len(run)) // the sequences before, without images
		}
		if media != nil {
			media = append(media, mediaPlaces(md)...)
		}
		payload = append(payload, id, int32(starts[i]), int32(len(s.Tokens)), int32(len(layout)))
		payload = append(append(payload, s.Tokens...), layout...)
		run = append(run, i)
		part = append(part, s)
	}
	if len(run) == 0 {
		return out
	}
	msg := Message{Op: OpForwardBatch, Model: p.id, Seq: int32(len(run)), FP32: fp32, Payload: payload, Media: media}
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
	case failed.rank >= 0:
		err = failed.reason("run its layers for this pass")
	}
	vocab := m.Config.VocabSize
	if err == nil && len(logits) != vocab*len(run) {
		err = fmt.Errorf("model: a batched pass of %d sequences returned %d logits", len(run), len(logits))
	}
	for j, i := range run {
		if err != nil {
			if !abandoned { // an abandoned pass keeps the caches (Forward)
				m.rewind(seqs[i].Caches, starts[i])
			}
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
	c := &stageContext{inner: inner, comm: comm, st: m.stage, vocab: m.Config.VocabSize, hiddenSize: m.Config.HiddenSize, layers: m.Config.NumLayers}
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
