package pipeline

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

// WorkerConfig is a worker process's setup (`mlxg worker`).
type WorkerConfig struct {
	// Hostfile is the MLX hostfile listing every rank's address, rank 0 first.
	Hostfile string
	// Rank is this process's, 1 or more; below 0: MLX_RANK's.
	Rank int
	// Threads are the CPU threads of the backend (0: all cores).
	Threads int
	// KV is this machine's memory policy: it plans the KV of this rank's layers.
	KV *kvstore.Policy
	// Prefix, when set, is this rank's prefix cache (Worker.Prefix).
	Prefix *kvstore.PrefixCache
	Log    *slog.Logger
}

// RunWorker runs one worker rank until rank 0 stops it (nil) or the group fails: it
// joins the hostfile's group and follows rank 0's messages (Worker), loading each model's
// stage on a backend of its own, planned by this machine's memory policy. It ends the
// process when rank 0 goes away, since the transfer it is blocked in would never return.
// It takes no context: a worker runs until rank 0 stops it, since one that left on its
// own would break rank 0's pipeline.
func RunWorker(c WorkerConfig) error {
	log, policy, prefix, hostfile, rank := c.Log, c.KV, c.Prefix, c.Hostfile, c.Rank
	if log == nil {
		log = slog.Default()
	}
	if policy == nil {
		policy = &kvstore.Policy{Log: log}
	}
	if hostfile == "" {
		return fmt.Errorf("a worker needs the hostfile: --hostfile FILE (or MLXG_HOSTFILE / MLX_HOSTFILE)")
	}
	if rank < 0 {
		k, v := envFirst("MLX_RANK")
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("a worker needs its rank: --rank N (or %s)", k)
		}
		rank = n
	}
	if rank == 0 {
		return fmt.Errorf("rank 0 is `mlxg serve --hostfile FILE`; workers are ranks 1 and up")
	}
	choice, err := backend.Select(backend.Options{Threads: c.Threads, Logger: log})
	if err != nil {
		return err
	}
	g, hosts, err := joinGroup(choice.Backend, hostfile, rank, log)
	if err != nil {
		return err
	}
	log.Info("worker ready", "rank", rank, "ranks", len(hosts), "backend", choice.Backend.Name())
	var mu sync.Mutex
	backends := map[*model.Model]compute.Backend{}
	var live net.Conn
	var stopping atomic.Bool
	bell := make(chan struct{}, 1024)
	gone := make(chan struct{})
	w := &Worker{
		Wire:   g,
		Log:    log,
		Prefix: prefix,
		Open: func(dir string, s Stage) (*model.Model, error) {
			local, err := resolveModelDir(dir)
			if err != nil {
				return nil, err
			}
			b, err := choice.ForModel()
			if err != nil {
				return nil, err
			}
			if mb, ok := b.(compute.Distributed); ok {
				if err := mb.UseDistributed(g); err != nil {
					backend.Release(b)
					return nil, err
				}
			}
			m, err := LoadStage(local, b, s)
			if err != nil {
				backend.Release(b)
				return nil, err
			}
			mu.Lock()
			backends[m] = b
			mu.Unlock()
			return m, nil
		},
		// This machine's memory policy plans the KV of its own layers, for the context
		// rank 0 loaded the model with, and sets the backend's limits from that plan.
		Loaded: func(m *model.Model, numCtx int) error {
			share, err := stageShape(m)
			if err != nil {
				return err
			}
			plan, err := policy.Plan(m.Dir, share, ctxOr(numCtx), true)
			if err != nil {
				return err
			}
			mu.Lock()
			b := backends[m]
			mu.Unlock()
			if prefix != nil {
				prefix.SetBudget(plan.PrefixBudget)
			}
			return backend.ApplyPlan(b, plan)
		},
		Caches: func(m *model.Model, dir string, numCtx int) ([]kvstore.Layer, error) {
			share, err := stageShape(m)
			if err != nil {
				return nil, err
			}
			caches, plan, err := policy.Caches(dir, share, ctxOr(numCtx))
			if err == nil && prefix != nil {
				prefix.SetBudget(plan.PrefixBudget)
			}
			return caches, err
		},
		Release: func(m *model.Model) {
			mu.Lock()
			b := backends[m]
			delete(backends, m)
			mu.Unlock()
			if b != nil {
				backend.Release(b)
			}
		},
		OnHello: func(addr string) error {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return fmt.Errorf("reaching rank 0 at %s: %w", addr, err)
			}
			if _, err := fmt.Fprintf(conn, "%d\n", rank); err != nil {
				conn.Close()
				return err
			}
			live = conn
			go func() {
				// Rank 0 writes a byte before each control message; the read ends when it
				// goes away, and so does the worker.
				buf := make([]byte, 64)
				for {
					n, err := conn.Read(buf)
					for range n {
						bell <- struct{}{}
					}
					if err != nil {
						break
					}
				}
				close(gone)
				if stopping.Load() {
					return
				}
				log.Error("rank 0 went away; stopping", "rank", rank)
				os.Exit(1)
			}()
			return nil
		},
		Doorbell: func() error {
			if live == nil {
				return nil // before OpHello
			}
			select {
			case <-bell:
				return nil
			case <-gone:
				return fmt.Errorf("rank 0 went away")
			}
		},
	}
	err = w.Run()
	stopping.Store(true)
	if live != nil {
		live.Close()
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	log.Info("worker stopped by rank 0", "rank", rank)
	return nil
}

// stageShape is this worker's share of m's shape, for its memory policy.
func stageShape(m *model.Model) (kvstore.ModelShape, error) {
	data, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		return kvstore.ModelShape{}, err
	}
	shape, err := kvstore.ShapeFromConfig(data, 0)
	if err != nil {
		return shape, err
	}
	s, _ := StageOf(m)
	return StageShape(shape, s, m.WeightBytes()), nil
}

// ctxOr is the context rank 0 loaded a model for, or 4096 when it did not say.
func ctxOr(n int) int {
	if n <= 0 {
		return 4096
	}
	return n
}

// maxWorkerSeqs is how many sequences' caches a worker keeps per model (the least
// recently used go first).
const maxWorkerSeqs = 16

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
		if err := passStatus(w.Wire, code, failure); err != nil {
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
		stages, err = SplitModel(cfg, w.Wire.Size())
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
	if len(msg.Media) > 0 {
		md, _, err := readPlaces(msg.Media, wm.m.Config.HiddenSize)
		if err != nil {
			return fill(err)
		}
		// The pass's layers read the sequence's media (M-RoPE positions, image spans)
		// from its caches, as in one process; rank 0 sends it with every pass.
		model.SetMedia(sq.caches, md)
		defer model.SetMedia(sq.caches, nil)
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

// forwardBatch runs one batched pass on a worker (OpForwardBatch).
func (w *Worker) forwardBatch(msg Message) (failure, broke error) {
	wm := w.models[msg.Model]
	n := int(msg.Seq)
	var part []model.Sequence
	total := 0
	var bad error
	pl := msg.Payload
	places := msg.Media // nil: no sequence of the pass has images
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
		if places != nil {
			md, rest, err := readPlaces(places, wm.m.Config.HiddenSize)
			if err != nil {
				bad = err
				continue
			}
			places = rest
			if md != nil {
				model.SetMedia(sq.caches, md)
				defer model.SetMedia(sq.caches, nil)
			}
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
