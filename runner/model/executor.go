package model

import (
	"context"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// A model may be one part of a model split over several processes (runner/pipeline
// runs each machine's range of the layers). This package knows nothing of how the
// parts talk: a part binds only its own weights (LoadConfig.Unbound) and hands its
// passes to an Executor, which runs this process's share with the model's network and
// trades the rest with the other processes. The generation loop keeps calling the
// Model's methods, as for a whole model.

// Executor runs the passes of a model that is one part of a model split over several
// processes, in place of the Model's own code for a whole model.
type Executor interface {
	// Forward, ForwardBatch and Batched stand in for the Model's.
	Forward(ctx context.Context, tokens []int32, caches []kvstore.Layer, all bool) ([]float32, error)
	ForwardBatch(ctx context.Context, seqs []Sequence) []Result
	Batched() bool
	// FillLayer is given caches just after FillCaches gave layer i, which had no cache,
	// the network's own, and returns the cache the layer keeps: a layer another process
	// runs needs none of its own here.
	FillLayer(caches []kvstore.Layer, i int) kvstore.Layer
	// PrefixSeq, PrefixRestore, PrefixSave and PrefixEnd stand in for the Model's: each
	// process keeps its own layers' blocks.
	PrefixSeq(caches []kvstore.Layer) kvstore.Seq
	PrefixRestore(caches []kvstore.Layer, tokens []int32, n int) (int, error)
	PrefixSave(caches []kvstore.Layer, tokens []int32)
	PrefixEnd(caches []kvstore.Layer)
	// Ranks describes the processes, as ps shows them.
	Ranks() []RankInfo
	// Close is called first when the model closes (the other processes drop their parts).
	Close()
}

// RankInfo is one process of a split model, as ps shows it.
type RankInfo struct {
	Rank   int
	Host   string
	Layers string // "0-13", or "head only"
	State  string // "ready", "gone", or "stalled" (another rank failed)
}

// HiddenSink is a context that wants the final normed hidden state of a pass (the input
// of the head) rather than only the logits (the server's embeddings). For a whole model
// such a context sees the head's input among its own ops; a split model's head runs in
// another process, so its Executor hands the state over through SetHidden instead.
type HiddenSink interface {
	SetHidden(h []float32)
}

// LoadConfig loads a model as one part of a model split over several processes
// (LoadWith). The zero value loads the whole model.
type LoadConfig struct {
	// Unbound names the weights the part leaves unbound (another process runs them):
	// they get an *Unbound of their dims, whose bytes are never read, and WeightBytes
	// leaves them out.
	Unbound func(l *Loader, name string) bool
	// Executor, when set, makes the part's Executor once its network is built.
	Executor func(m *Model) (Executor, error)
	// Residency, when set, streams the model's experts through the manager (a backend
	// that can reads them from it instead of the mapping); the model closes it, at once
	// when the backend bound nothing to it (Model.Residency is then nil).
	Residency *residency.Manager
}

// Unbound is a weight another process binds: its dims only, so that an architecture
// builds as for a whole model and an Executor can tell where its own layers end.
type Unbound struct {
	Out, In int
	Q       compute.Quant
}

func (u *Unbound) Dims() (int, int)     { return u.Out, u.In }
func (u *Unbound) Quant() compute.Quant { return u.Q }
func (u *Unbound) Len() int             { return u.Out }

// LoadWith is Load for one part of a split model.
func LoadWith(dir string, backend compute.Backend, c LoadConfig) (*Model, error) {
	m, err := load(dir, backend, c.Unbound, c.Residency)
	if err != nil {
		return nil, err
	}
	if c.Executor != nil {
		if m.exec, err = c.Executor(m); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// Executor returns the executor the model was loaded with, nil for a whole model.
func (m *Model) Executor() Executor { return m.exec }

// PrefixRestore restores, for a split model, the same prefix on the other processes
// that this one restored (n positions of tokens), and returns the positions every
// process holds. A whole model holds n.
func (m *Model) PrefixRestore(caches []kvstore.Layer, tokens []int32, n int) (int, error) {
	if m.exec != nil {
		return m.exec.PrefixRestore(caches, tokens, n)
	}
	return n, nil
}

// PrefixSave makes the other processes of a split model save their layers' blocks of
// tokens, as this one just did.
func (m *Model) PrefixSave(caches []kvstore.Layer, tokens []int32) {
	if m.exec != nil {
		m.exec.PrefixSave(caches, tokens)
	}
}

// PrefixEnd ends the other processes' prefix-cache session of the sequence.
func (m *Model) PrefixEnd(caches []kvstore.Layer) {
	if m.exec != nil {
		m.exec.PrefixEnd(caches)
	}
}

// Ranks describes the processes of a split model (nil for a whole model).
func (m *Model) Ranks() []RankInfo {
	if m.exec != nil {
		return m.exec.Ranks()
	}
	return nil
}

// BoundBytes is the size of the tensors of the checkpoint in dir that a LoadWith
// leaving unbound's weights unbound binds, without loading it: the memory policy
// plans a part's memory before it loads.
func BoundBytes(dir string, unbound func(l *Loader, name string) bool) (int64, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return 0, err
	}
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer ckpt.Close()
	return boundBytes(&Loader{Config: cfg, ckpt: ckpt}, unbound), nil
}

// boundBytes is the size of l's checkpoint's tensors that unbound does not name.
func boundBytes(l *Loader, unbound func(l *Loader, name string) bool) int64 {
	var n int64
	for _, f := range l.ckpt.Files {
		for _, t := range f.Header.Tensors {
			if unbound == nil || !unbound(l, t.Name) {
				n += t.End - t.Begin
			}
		}
	}
	return n
}
