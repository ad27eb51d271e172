package pipelinetest

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/pipeline"
)

// Config describes an in-process pipeline.
type Config struct {
	// Ranks is the number of ranks, 2 or more.
	Ranks int
	// Backend opens rank's backend (the CPU backend, say); each rank gets its own, as
	// each machine has.
	Backend func(rank int) compute.Backend
	// Prefix, when set, gives a worker rank its own prefix cache (pipeline.Worker.Prefix).
	Prefix func(rank int) *kvstore.PrefixCache
	// Open, when set, loads a worker's stage in place of pipeline.LoadStage on its
	// backend b (a test makes a rank refuse a model with it).
	Open func(dir string, s pipeline.Stage, b *Backend) (*model.Model, error)
}

// Pipeline is a pipeline whose ranks are goroutines of this process: rank 0's Leader,
// which the test drives (Leader.Load, or runner.LoadOptions.Pipeline), and a
// pipeline.Worker on every other rank.
type Pipeline struct {
	Net      *Net
	Leader   *pipeline.Leader
	Backends []*Backend // each rank's; rank 0 loads with Backends[0]
	done     chan error
}

// Start starts the ranks. The test's cleanup stops the workers (Leader.Stop) and
// fails the test when one of them ended with an error; when the pipeline broke (a rank
// Cut, say), it closes the net instead, which ends every worker.
func Start(t testing.TB, c Config) *Pipeline {
	t.Helper()
	n := NewNet(c.Ranks)
	p := &Pipeline{Net: n, done: make(chan error, c.Ranks)}
	for r := range c.Ranks {
		p.Backends = append(p.Backends, n.Backend(r, c.Backend(r)))
	}
	leader, err := pipeline.NewLeader(n.Wire(0))
	if err != nil {
		t.Fatal(err)
	}
	leader.Timeout = 2 * time.Minute
	p.Leader = leader
	for r := 1; r < c.Ranks; r++ {
		b := p.Backends[r]
		open := c.Open
		if open == nil {
			open = func(dir string, s pipeline.Stage, b *Backend) (*model.Model, error) {
				return pipeline.LoadStage(dir, b, s)
			}
		}
		w := &pipeline.Worker{
			Wire: n.Wire(r),
			Open: func(dir string, s pipeline.Stage) (*model.Model, error) { return open(dir, s, b) },
			Log:  slog.New(slog.DiscardHandler),
		}
		if c.Prefix != nil {
			w.Prefix = c.Prefix(r)
		}
		go func() {
			err := w.Run()
			if err != nil {
				err = fmt.Errorf("rank %d: %w", r, err)
			}
			p.done <- err
		}()
	}
	t.Cleanup(func() {
		defer n.Close()
		broken := leader.Broken() != nil
		if !broken {
			if err := leader.Stop(); err != nil {
				t.Errorf("stopping the workers: %v", err)
			}
		} else {
			n.Close() // the workers' transfers fail, and they end
		}
		for r := 1; r < c.Ranks; r++ {
			select {
			case err := <-p.done:
				if err != nil && !broken {
					t.Errorf("a worker ended with an error: %v", err)
				}
			case <-time.After(time.Minute):
				t.Errorf("the workers did not stop")
				return
			}
		}
	})
	return p
}
