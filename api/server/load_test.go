package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
	"github.com/prometheus/client_golang/prometheus"
)

// TestLoadContinuousBatch is the load test of continuous batching: 500 streaming requests, 8 at a time, over
// /api/generate, /api/chat and /v1/chat/completions on the scripted model batched 8 ways, every tenth client
// leaving mid-stream (a prompt the model never stops answering, cut after its first chunk). Every other
// request gets the scripted reply whole, nothing errs, the steps did batch, and once the clients are done
// the server's goroutines are back to what they were before the load.
func TestLoadContinuousBatch(t *testing.T) {
	const total, concurrency = 500, 8
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2, Parallel: concurrency},
		Sched: sched.Config{NumParallel: concurrency}, Version: "test", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() {
		ts.Close()
		srv.Close()
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}

	// request i: its path, body, and whether the client leaves after the first chunk.
	request := func(i int) (string, string, bool) {
		leave := i%10 == 9
		q := fmt.Sprintf("Weather %d?", i)
		switch i % 3 {
		case 0:
			if leave {
				return "/api/generate", `{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0,"num_predict":400}}`, true
			}
			return "/api/generate", `{"model":"scripted","think":false,"prompt":"` + q + `"}`, false
		case 1:
			if leave {
				return "/api/chat", `{"model":"scripted","think":false,"options":{"num_predict":400},"messages":[{"role":"user","content":"` + q + `"},{"role":"assistant","content":"zzzz"}]}`, true
			}
			return "/api/chat", `{"model":"scripted","think":false,"messages":[{"role":"user","content":"` + q + `"}]}`, false
		}
		if leave {
			return "/api/generate", `{"model":"scripted","raw":true,"prompt":"zz zz","options":{"temperature":0,"num_predict":400}}`, true
		}
		return "/v1/chat/completions", `{"model":"scripted","stream":true,"reasoning_effort":"none","messages":[{"role":"user","content":"` + q + `"}]}`, false
	}
	// run sends request i and returns what went wrong, if anything.
	run := func(i int) error {
		path, body, leave := request(i)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: status %d: %s", path, resp.StatusCode, b)
		}
		sc := bufio.NewScanner(resp.Body)
		var text strings.Builder
		for sc.Scan() {
			line := sc.Text()
			if leave {
				cancel() // the client goes away mid-stream
				return nil
			}
			switch {
			case path == "/v1/chat/completions":
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var c struct {
					Choices []struct {
						Delta struct{ Content string } `json:"delta"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					return fmt.Errorf("%s: %q: %v", path, data, err)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Delta.Content)
				}
			default:
				var c struct {
					Response string
					Message  struct{ Content string }
					Error    string
				}
				if err := json.Unmarshal([]byte(line), &c); err != nil {
					return fmt.Errorf("%s: %q: %v", path, line, err)
				}
				if c.Error != "" {
					return fmt.Errorf("%s: %s", path, c.Error)
				}
				text.WriteString(c.Response + c.Message.Content)
			}
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if got := strings.TrimSpace(text.String()); got != apitest.PlainReply {
			return fmt.Errorf("%s: reply %q, want %q", path, got, apitest.PlainReply)
		}
		return nil
	}

	if err := run(0); err != nil { // load the model before counting goroutines
		t.Fatal(err)
	}
	client.CloseIdleConnections()
	before := settledGoroutines(0)

	start := time.Now()
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first []error
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= total {
					return
				}
				if err := run(i); err != nil {
					errs.Add(1)
					mu.Lock()
					if len(first) < 5 {
						first = append(first, fmt.Errorf("request %d: %w", i, err))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if errs.Load() > 0 {
		t.Errorf("%d of %d requests failed, first: %v", errs.Load(), total, first)
	}
	var ps api.ProcessResponse
	resp, err := client.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&ps)
	resp.Body.Close()
	if len(ps.Models) != 1 || ps.Models[0].Batch == nil {
		t.Fatalf("ps: %+v", ps)
	}
	b := ps.Models[0].Batch
	if b.MaxSequences != concurrency || b.MeanSequences < 2 {
		t.Errorf("ps batch %+v: the requests were not batched", *b)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metrics := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			metrics[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	if metrics["mlxg_batch_max_sequences"] != concurrency || metrics["mlxg_batch_steps_total"] != float64(b.Steps) ||
		metrics["mlxg_batch_sequence_steps_total"] < 2*float64(b.Steps) || metrics["mlxg_batch_sequences"] != 0 {
		t.Errorf("batch metrics %v, ps %+v", metrics, *b)
	}
	client.CloseIdleConnections()
	after := settledGoroutines(before)
	if after > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before the load, %d after:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("%d requests in %v, %.2f sequences per step over %d steps; goroutines %d before, %d after",
		total, took.Round(time.Millisecond), b.MeanSequences, b.Steps, before, after)
}

// settledGoroutines waits up to 5 s for the goroutine count to fall to want (0: to stop changing) and
// returns it.
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if (want > 0 && m <= want) || (want == 0 && m == n) {
			return m
		}
		n = m
	}
	return n
}

// TestBatchCap: the KV policy's headroom limits the sequences batched to those whose caches fit.
func TestBatchCap(t *testing.T) {
	plan := func(avail, weights, kv int64) kvstore.Plan {
		p := kvstore.Plan{Weights: weights, KVBytes: kv}
		p.Memory.Available = uint64(avail)
		return p
	}
	for _, c := range []struct {
		parallel int
		plan     kvstore.Plan
		want     int
	}{
		{1, plan(1<<30, 1<<20, 1<<20), 1},
		{8, plan(100<<20, 10<<20, 10<<20), 8}, // room for 9 caches
		{8, plan(40<<20, 10<<20, 10<<20), 3},  // the weights, 1 cache and 2 more
		{8, plan(15<<20, 10<<20, 10<<20), 1},  // not even one more
		{4, plan(100<<20, 10<<20, 0), 4},      // no KV size known
	} {
		if got := batchCap(c.parallel, c.plan); got != c.want {
			t.Errorf("batchCap(%d, headroom %d, kv %d) = %d, want %d", c.parallel, c.plan.Headroom(), c.plan.KVBytes, got, c.want)
		}
	}
}
