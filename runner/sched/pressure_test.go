package sched

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
)

const gib = int64(1) << 30

// procMachine is a fake linux machine seen through fake /proc and /sys trees, read by the real sensor
// (sysmem.Linux) and planned for by the real KV policy: MemAvailable (or the cgroup's usage) follows the
// models loaded, PSI reads whatever the test writes.
type procMachine struct {
	t      *testing.T
	root   string
	mu     sync.Mutex
	total  int64
	others int64           // held by other processes
	models map[Model]int64 // loaded models' peaks
	limit  int64           // a cgroup v1 memory limit; 0: none
	policy *kvstore.Policy
}

func newProcMachine(t *testing.T, total, others int64, psi string) *procMachine {
	m := &procMachine{t: t, root: t.TempDir(), total: total, others: others, models: map[Model]int64{}}
	m.write("proc/pressure/memory", psi)
	m.policy = &kvstore.Policy{Sensor: sysmem.Linux{Root: m.root}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	m.mu.Lock()
	m.syncLocked()
	m.mu.Unlock()
	return m
}

func (m *procMachine) write(rel, content string) {
	p := filepath.Join(m.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// syncLocked rewrites the memory files from what is held.
func (m *procMachine) syncLocked() {
	used := m.others
	for _, n := range m.models {
		used += n
	}
	m.write("proc/meminfo", fmt.Sprintf("MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
		m.total>>10, (m.total-used)>>10, (m.total-used)>>10))
	if m.limit > 0 {
		m.write("proc/self/cgroup", "4:memory:/job\n0::/job\n")
		m.write("proc/self/mountinfo", "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
		m.write("sys/fs/cgroup/memory/job/memory.limit_in_bytes", strconv.FormatInt(m.limit, 10))
		m.write("sys/fs/cgroup/memory/job/memory.usage_in_bytes", strconv.FormatInt(used, 10))
	}
}

func (m *procMachine) read() sysmem.Info {
	info, err := sysmem.Linux{Root: m.root}.Read()
	if err != nil {
		m.t.Fatal(err)
	}
	return info
}

type procModel struct {
	fakeModel
	m *procMachine
}

func (pm *procModel) Close() error {
	pm.m.mu.Lock()
	delete(pm.m.models, pm)
	pm.m.syncLocked()
	pm.m.mu.Unlock()
	return pm.fakeModel.Close()
}

// shape is a Qwen3-8B-like model with 4-bit weights.
func shape() kvstore.ModelShape {
	s := kvstore.ModelShape{WeightBytes: 4600 << 20, MaxContext: 40960}
	for range 36 {
		s.Layers = append(s.Layers, kvstore.LayerShape{Kind: kvstore.LayerFull, KVHeads: 8, KHeadDim: 128, VHeadDim: 128})
	}
	return s
}

// req asks for a model as the server does: the estimate is the policy's plan with what unloading frees,
// the load plans again with the memory it then reads and takes the plan's peak.
func (m *procMachine) req(key string, numCtx int) Request {
	s := shape()
	return Request{Key: key, Name: key, Fingerprint: strconv.Itoa(numCtx),
		EstimateFreeing: func(freed int64) (int64, error) {
			p, err := m.policy.PlanFreeing(key, s, numCtx, freed)
			return p.Peak(), err
		},
		Load: func(context.Context) (Model, error) {
			p, err := m.policy.Plan(key, s, numCtx, false)
			if err != nil {
				return nil, err
			}
			pm := &procModel{fakeModel: fakeModel{name: key}, m: m}
			m.mu.Lock()
			m.models[pm] = p.Peak()
			m.syncLocked()
			m.mu.Unlock()
			return pm, nil
		}}
}

// TestPressure: memory stalls while most memory is free (other jobs paging: full avg10 near 20%) are no
// reason to refuse. The running model stays loaded and serving, a second model loads beside it, a reload
// with a larger context waits for the running requests and then goes ahead; nothing is refused.
func TestPressure(t *testing.T) {
	for name, psi := range map[string]string{
		"burst":     "some avg10=35.00 avg60=9.00 avg300=2.50 total=1\nfull avg10=19.50 avg60=6.00 avg300=1.20 total=1\n",
		"sustained": "some avg10=30.00 avg60=25.00 avg300=20.00 total=1\nfull avg10=20.00 avg60=20.00 avg300=20.00 total=1\n",
	} {
		t.Run(name, func(t *testing.T) {
			checkNoLeak(t)
			m := newProcMachine(t, 24*gib, 4*gib, psi) // 20 of 24 GiB free
			if info := m.read(); info.Pressure == sysmem.Critical {
				t.Fatalf("stalls with most memory free read as critical: %v", info)
			}
			s := New(Config{NumParallel: 2})
			defer s.Close()

			la, err := s.Acquire(context.Background(), m.req("a", 8192))
			if err != nil {
				t.Fatalf("first load: %v", err)
			}
			a := la.Model
			if info := m.read(); info.Pressure == sysmem.Critical {
				t.Fatalf("critical with a model loaded and %v", info)
			}

			// A second model while the first serves: it fits beside it.
			lb, err := s.Acquire(context.Background(), m.req("b", 8192))
			if err != nil {
				t.Fatalf("second model: %v (%v)", err, m.read())
			}
			lb.Release()

			// The same model with a larger context while a request holds it: queued, not refused, and the
			// running model keeps serving meanwhile.
			reload := make(chan error, 1)
			var reloaded Model
			go func() {
				l, err := s.Acquire(context.Background(), m.req("a", 16384))
				if err == nil {
					reloaded = l.Model
					l.Release()
				}
				reload <- err
			}()
			select {
			case err := <-reload:
				t.Fatalf("the reload did not wait for the running request: %v", err)
			case <-time.After(30 * time.Millisecond):
			}
			if a.(*procModel).closed.Load() != 0 {
				t.Fatal("the running model was unloaded while serving")
			}
			l2, err := s.Acquire(context.Background(), m.req("a", 8192))
			if err != nil || l2.Model != a {
				t.Fatalf("the running model does not serve a second request: %v", err)
			}
			l2.Release()
			la.Release()
			if err := <-reload; err != nil {
				t.Fatalf("reload: %v (%v)", err, m.read())
			}
			if reloaded == a || a.(*procModel).closed.Load() != 1 {
				t.Fatal("the reload did not replace the old model")
			}
			if info := m.read(); info.Pressure == sysmem.Critical {
				t.Fatalf("critical after the loads: %v", info)
			}
		})
	}
}

// TestPressureRealShortage: the contrast, a cgroup v1 limit nearly used up by other processes: the new
// model is refused with the transient error, and the running one stays loaded and serving.
func TestPressureRealShortage(t *testing.T) {
	m := newProcMachine(t, 24*gib, 2*gib, "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")
	s := New(Config{})
	defer s.Close()
	la, err := s.Acquire(context.Background(), m.req("a", 4096))
	if err != nil {
		t.Fatal(err)
	}
	a := la.Model
	la.Release()

	m.mu.Lock()
	m.limit, m.others = 12*gib, 6*gib // the job is capped at 12 GiB; others now hold 6 of it
	m.syncLocked()
	m.mu.Unlock()
	if info := m.read(); info.Total != uint64(12*gib) {
		t.Fatalf("the cgroup v1 limit is not seen: %v", info)
	}
	l, err := s.Acquire(context.Background(), m.req("a", 32768))
	if !errors.Is(err, ErrBusy) {
		if l != nil {
			l.Release()
		}
		t.Fatalf("reload that does not fit: %v, want ErrBusy (%v)", err, m.read())
	}
	var me *kvstore.MemoryError
	if !errors.As(err, &me) {
		t.Errorf("the cause is not the policy's MemoryError: %v", err)
	}
	l, err = s.Acquire(context.Background(), m.req("a", 4096))
	if err != nil || l.Model != a || a.(*procModel).closed.Load() != 0 {
		t.Fatalf("the running model does not serve after the refusal: %v", err)
	}
	l.Release()
}
