package kvstore

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// A stand-in model for the prefix cache's tests: each layer's keys and values at a
// position are a pseudo-random function of (layer, position, token), and a recurrent
// state folds every token in, so a sequence's caches depend on its whole prefix exactly
// as a model's do, and a restored prefix must give bit-identical attention.
type fakeModel struct {
	kinds []string // "fp16", "k8v4", "q4_0", "k4v4", "k8v4h", "q4_0h", "ring", "ringh", "none", per layer
	start int      // quantized_kv_start
	rec   int      // recurrent states
}

const fHeads, fKDim, fVDim, fWindow = 2, 64, 32, 300

func (m fakeModel) newSeq(t *testing.T) Seq {
	t.Helper()
	var s Seq
	for _, k := range m.kinds {
		var (
			l   Layer
			err error
		)
		switch k {
		case "fp16":
			l, err = NewFull(fHeads, fKDim, fVDim, false)
		case "k8v4":
			l, err = NewQuantized(fHeads, fKDim, fVDim, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}, m.start)
		case "k4v4":
			l, err = NewQuantized(fHeads, fKDim, fVDim, Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)}, m.start)
		case "q4_0":
			l, err = NewQuantized(fHeads, fKDim, fVDim, Spec{K: FormatQ4_0, V: FormatQ4_0}, m.start)
		case "k8v4h": // rotated keys and values
			l, err = NewQuantized(fHeads, fKDim, fVDim, Spec{K: AffineFormat(8, 64).Rotate(true), V: AffineFormat(4, 32).Rotate(true)}, m.start)
		case "q4_0h":
			l, err = NewQuantized(fHeads, fKDim, fVDim, Spec{K: FormatQ4_0.Rotate(true), V: FormatQ4_0.Rotate(true)}, m.start)
		case "ring":
			l, err = NewRotating(fHeads, fKDim, fVDim, fWindow, Spec{K: AffineFormat(8, 64), V: AffineFormat(8, 32)}, m.start)
		case "ringh":
			l, err = NewRotating(fHeads, fKDim, fVDim, fWindow, Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32).Rotate(true)}, m.start)
		case "none":
		default:
			t.Fatalf("unknown kind %q", k)
		}
		if err != nil {
			t.Fatal(err)
		}
		s.Layers = append(s.Layers, l)
	}
	for i := 0; i < m.rec; i++ {
		r, err := NewRecurrent(16, 8)
		if err != nil {
			t.Fatal(err)
		}
		s.Recurrent = append(s.Recurrent, r)
	}
	return s
}

func kvAt(layer, pos int, tok int32) ([]float32, []float32) {
	r := rand.New(rand.NewPCG(uint64(layer)<<40|uint64(pos), uint64(tok)+1))
	return randVec(r, fHeads*fKDim), randVec(r, fHeads*fVDim)
}

// fill appends tokens[from:] to every layer in chunks of chunk positions.
func fill(t *testing.T, s Seq, tokens []int32, from, chunk int) {
	t.Helper()
	for lo := from; lo < len(tokens); lo += chunk {
		hi := min(lo+chunk, len(tokens))
		for i, l := range s.Layers {
			if l == nil {
				continue
			}
			var k, v []float32
			for p := lo; p < hi; p++ {
				kp, vp := kvAt(i, p, tokens[p])
				k, v = append(k, kp...), append(v, vp...)
			}
			if err := l.Append(k, v, hi-lo); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range s.Recurrent {
			for p := lo; p < hi; p++ {
				for j := 0; j < 2; j++ {
					st := r.State(j)
					for e := range st {
						st[e] = 0.9*st[e] + float32((int(tokens[p])*31+p*7+e)%97)/97
					}
				}
			}
			r.Advance(hi - lo)
		}
	}
}

// probe attends with a fixed query at the last position of every layer and returns the
// outputs and recurrent states, which a restored sequence must reproduce bit for bit.
func probe(t *testing.T, s Seq) []float32 {
	t.Helper()
	var out []float32
	r := rand.New(rand.NewPCG(5, 5))
	q := randVec(r, 2*fHeads*fKDim)
	for _, l := range s.Layers {
		if l == nil {
			continue
		}
		o := make([]float32, 2*fHeads*fVDim)
		if err := l.Attend(Attention{Q: q, Out: o, N: 1, Heads: 2 * fHeads, Scale: 0.125}); err != nil {
			t.Fatal(err)
		}
		out = append(out, o...)
	}
	for _, rc := range s.Recurrent {
		out = append(out, rc.State(0)...)
		out = append(out, rc.State(1)...)
	}
	return out
}

func tokensOf(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(1000))
	}
	return out
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)) }

// serve runs one request through the cache as the engine does: restore what it can of
// the prompt minus its last token, fill the rest, save, probe, end.
func serve(t *testing.T, p *PrefixCache, m fakeModel, prompt []int32) ([]float32, RequestStats) {
	t.Helper()
	s := m.newSeq(t)
	key, err := NewModelKey("test-checkpoint", s)
	if err != nil {
		t.Fatal(err)
	}
	sess := p.Begin(key, s)
	n := sess.Restore(prompt[:len(prompt)-1])
	if got := s.len(); got != n {
		t.Fatalf("restored %d tokens, the caches hold %d", n, got)
	}
	fill(t, s, prompt[:len(prompt)-1], n, 100)
	sess.Save(prompt[:len(prompt)-1])
	fill(t, s, prompt, len(prompt)-1, 100)
	out := probe(t, s)
	sess.Stats.Prefilled = len(prompt) - n
	sess.End()
	return out, sess.Stats
}

func cold(t *testing.T, m fakeModel, prompt []int32) []float32 {
	s := m.newSeq(t)
	fill(t, s, prompt[:len(prompt)-1], 0, 100)
	fill(t, s, prompt, len(prompt)-1, 100)
	return probe(t, s)
}

var prefixModels = map[string]fakeModel{
	"fp16":           {kinds: []string{"fp16", "fp16", "none"}},
	"quantized":      {kinds: []string{"k8v4", "k4v4", "q4_0", "k8v4"}},
	"quantized from": {kinds: []string{"k8v4", "fp16"}, start: 300},
	"rotated":        {kinds: []string{"k8v4h", "q4_0h", "k8v4"}},
	"rotated from":   {kinds: []string{"k8v4h", "fp16"}, start: 300},
	"rotated ring":   {kinds: []string{"ringh", "k8v4h"}},
	"rotating":       {kinds: []string{"fp16", "ring", "k8v4"}},
	"hybrid":         {kinds: []string{"none", "k8v4", "none"}, rec: 2},
}

// TestPrefixHitsMatchCold serves a shared system prompt with a growing conversation from
// the RAM tier and, after a "restart", from the SSD tier, for every cache kind, and
// checks every answer against the same prompt computed cold.
func TestPrefixHitsMatchCold(t *testing.T) {
	for name, m := range prefixModels {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			system := tokensOf(1, 600)
			turn1 := append(slices.Clone(system), tokensOf(2, 150)...)
			turn2 := append(slices.Clone(turn1), tokensOf(3, 300)...)
			other := append(slices.Clone(system), tokensOf(4, 40)...)
			p, err := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			check := func(p *PrefixCache, prompt []int32, wantCached int) RequestStats {
				t.Helper()
				got, st := serve(t, p, m, prompt)
				if want := cold(t, m, prompt); !slices.Equal(got, want) {
					t.Fatalf("%d-token prompt restored from %d cached tokens differs from cold", len(prompt), st.Cached)
				}
				if wantCached >= 0 && st.Cached != wantCached {
					t.Fatalf("%d-token prompt: %d tokens cached, want %d (%+v)", len(prompt), st.Cached, wantCached, st)
				}
				return st
			}
			stateful := m.rec > 0 || slices.Contains(m.kinds, "ring") || slices.Contains(m.kinds, "ringh")
			check(p, turn1, 0)
			// turn2 extends turn1: everything up to turn1's saved end (its last token excluded) is reused.
			want := len(turn1) - 1
			if m.start > 0 {
				want = 0 // a converted cache's pages do not fit a fresh cache still in fp16: computed cold
			}
			st := check(p, turn2, want)
			if m.start == 0 && (st.RAMHits != 3 || st.DiskHits != 0) {
				t.Fatalf("turn 2: %+v, want 3 RAM blocks (2 full, 1 partial)", st)
			}
			// A prompt sharing only the system prompt reuses its full blocks, when it can resume there.
			want = 512
			if stateful || m.start > 0 {
				want = 0
			}
			check(p, other, want)
			p.Close()

			// Restart: RAM is empty, the blocks come from SSD. turn3 extends turn2, whose
			// request saved its 4 full blocks and the partial at its end.
			p2, err := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			defer p2.Close()
			turn3 := append(slices.Clone(turn2), tokensOf(5, 100)...)
			want = len(turn2) - 1
			if m.start > 0 {
				want = 0
			}
			st = check(p2, turn3, want)
			if m.start == 0 && (st.DiskHits != 5 || st.RAMHits != 0) {
				t.Fatalf("after a restart: %+v, want 5 blocks from SSD", st)
			}
			// The same request again is a RAM hit of its own saved prefix.
			st = check(p2, turn3, -1)
			if m.start == 0 && (st.Cached != len(turn3)-1 || st.DiskHits != 0) {
				t.Fatalf("repeat: %+v, want all but the last token from RAM", st)
			}
		})
	}
}

// TestPrefixSharedBlockCopyOnWrite: a block handed out by reference stays unchanged when
// the cache that shares it is truncated into it and written again.
func TestPrefixSharedBlockCopyOnWrite(t *testing.T) {
	for _, kind := range []string{"fp16", "k8v4"} {
		m := fakeModel{kinds: []string{kind}}
		p, _ := NewPrefixCache(PrefixConfig{Log: quietLog()})
		prompt := tokensOf(7, 600)
		want, _ := serve(t, p, m, prompt)

		s := m.newSeq(t)
		key, _ := NewModelKey("test-checkpoint", s)
		sess := p.Begin(key, s)
		if n := sess.Restore(prompt[:len(prompt)-1]); n != len(prompt)-1 {
			t.Fatalf("%s: restored %d", kind, n)
		}
		s.Layers[0].Truncate(300) // inside the second shared block
		fill(t, s, tokensOf(8, 400), 300, 100)
		sess.End()

		if got, _ := serve(t, p, m, prompt); !slices.Equal(got, want) {
			t.Fatalf("%s: a shared block changed under a write", kind)
		}
	}
}

func TestPrefixRAMEviction(t *testing.T) {
	m := fakeModel{kinds: []string{"fp16"}}
	p, _ := NewPrefixCache(PrefixConfig{Log: quietLog()})
	prompts := [][]int32{tokensOf(10, 513), tokensOf(11, 513), tokensOf(12, 513)}
	for _, pr := range prompts {
		serve(t, p, m, pr)
	}
	per := p.Stats().RAMBytes / 3
	// Hold the first prompt's blocks in a live session, then shrink the budget to one prompt.
	s := m.newSeq(t)
	key, _ := NewModelKey("test-checkpoint", s)
	held := p.Begin(key, s)
	if n := held.Restore(prompts[0][:512]); n != 512 {
		t.Fatalf("restored %d", n)
	}
	p.SetBudget(per)
	st := p.Stats()
	if st.RAMBytes > per || st.RAMEvictions == 0 {
		t.Fatalf("after SetBudget(%d): %d bytes, %d evictions", per, st.RAMBytes, st.RAMEvictions)
	}
	if _, rs := serve(t, p, m, prompts[0]); rs.Cached != 512 {
		t.Fatalf("the referenced prompt was evicted: %+v", rs)
	}
	if _, rs := serve(t, p, m, prompts[1]); rs.Cached != 0 {
		t.Fatalf("an unreferenced prompt survived eviction: %+v", rs)
	}
	held.End()
}

// blockFiles lists the SSD tier's block files.
func blockFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := listFiles(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		out = append(out, f.path)
	}
	slices.Sort(out)
	return out
}

// TestPrefixBadBlockFiles: truncated, garbled and misplaced block files are misses,
// deleted and logged, never served.
func TestPrefixBadBlockFiles(t *testing.T) {
	m := fakeModel{kinds: []string{"k8v4", "fp16"}}
	dir := t.TempDir()
	p, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	prompt := tokensOf(20, 1100) // 4 full blocks and a partial
	serve(t, p, m, prompt)
	p.Close()
	files := blockFiles(t, dir)
	if len(files) != 5 {
		t.Fatalf("%d block files, want 5", len(files))
	}
	// Find the files by position: block 1 garbled (one data byte), block 2 truncated.
	byPos := map[int]string{}
	for _, f := range files {
		b, _, err := readBlockFile(f)
		if err != nil {
			t.Fatal(err)
		}
		byPos[b.Pos] = f
	}
	raw, _ := os.ReadFile(byPos[256])
	raw[len(raw)-10] ^= 0x40
	os.WriteFile(byPos[256], raw, 0o644)
	raw, _ = os.ReadFile(byPos[512])
	os.WriteFile(byPos[512], raw[:len(raw)/2], 0o644)

	var logs bytes.Buffer
	p2, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer p2.Close()
	got, st := serve(t, p2, m, prompt)
	if want := cold(t, m, prompt); !slices.Equal(got, want) {
		t.Fatal("output after bad blocks differs from cold")
	}
	if st.Cached != 256 || st.DiskHits != 1 {
		t.Fatalf("%+v: want block 0 from SSD and the chain cut at the garbled block 1", st)
	}
	if !strings.Contains(logs.String(), "failed verification") {
		t.Fatalf("nothing logged: %s", logs.String())
	}
	if p2.Stats().DiskRejected != 2 { // read together: both found bad, deleted, then written anew by this request
		t.Fatalf("rejected %d", p2.Stats().DiskRejected)
	}
	// The request rewrote block 1 and everything after it.
	p2.Flush()
	ok, removed, err := VerifyDisk(dir, quietLog())
	if err != nil || removed != 0 || ok != 5 {
		t.Fatalf("VerifyDisk: %d ok, %d removed, %v; want the rewritten blocks valid", ok, removed, err)
	}
	os.WriteFile(byPos[0], []byte("not a safetensors file"), 0o644)
	if ok, removed, _ := VerifyDisk(dir, quietLog()); removed != 1 || ok != 4 {
		t.Fatalf("VerifyDisk: %d ok, %d removed; want the garbled block 0 removed", ok, removed)
	}
}

func TestPrefixDiskFull(t *testing.T) {
	m := fakeModel{kinds: []string{"fp16"}}
	var logs bytes.Buffer
	p, _ := NewPrefixCache(PrefixConfig{Dir: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	defer p.Close()
	p.disk.write = func(path string, _ []safetensors.Tensor, _ map[string]string) error {
		return &os.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	for i := range 3 {
		serve(t, p, m, tokensOf(uint64(30+i), 700))
		p.Flush()
	}
	if n := strings.Count(logs.String(), "disk is full"); n != 1 {
		t.Fatalf("logged %d times: %s", n, logs.String())
	}
	if !p.Stats().DiskFull {
		t.Fatal("not marked full")
	}
	// Serving goes on from RAM.
	if _, st := serve(t, p, m, tokensOf(30, 700)); st.Cached != 699 || st.Written != 0 {
		t.Fatalf("%+v", st)
	}
}

func TestPrefixDiskCap(t *testing.T) {
	m := fakeModel{kinds: []string{"fp16"}}
	dir := t.TempDir()
	p, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	serve(t, p, m, tokensOf(40, 257))
	p.Flush()
	one := p.Stats().DiskBytes / 2 // a full block and a 1-token partial; cap at about 3 full blocks
	p.Close()
	p, _ = NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog(), MaxDiskBytes: 3 * one})
	defer p.Close()
	for i := range 4 {
		serve(t, p, m, tokensOf(uint64(41+i), 257))
		p.Flush()
	}
	st := p.Stats()
	if st.DiskBytes > 3*one || st.DiskEvictions == 0 {
		t.Fatalf("%d bytes on disk over a cap of %d, %d evicted", st.DiskBytes, 3*one, st.DiskEvictions)
	}
	// After a restart, the newest prompt comes from SSD and the oldest is gone.
	p.Close()
	p2, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	defer p2.Close()
	if _, rs := serve(t, p2, m, tokensOf(44, 257)); rs.DiskHits != 1 {
		t.Fatalf("the newest block was evicted: %+v", rs)
	}
	if _, rs := serve(t, p2, m, tokensOf(41, 257)); rs.Cached != 0 {
		t.Fatalf("the oldest block survived: %+v", rs)
	}
}

func TestPrefixHotBlocks(t *testing.T) {
	m := fakeModel{kinds: []string{"fp16"}}
	dir := t.TempDir()
	p, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	prompt := tokensOf(50, 800)
	serve(t, p, m, prompt)
	p.Close()
	p2, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog(), Hot: 64})
	p2.disk.wg.Wait() // the hot loader
	defer p2.Close()
	if st := p2.Stats(); st.RAMBlocks != 4 {
		t.Fatalf("%d hot blocks in RAM, want 4", st.RAMBlocks)
	}
	// The first request to use the preloaded blocks got them from the SSD (read at start-up):
	// they count as SSD hits, not RAM hits, so the PERF line tells a restore after a restart
	// from a RAM hit.
	got, st := serve(t, p2, m, prompt)
	if st.RAMHits != 0 || st.DiskHits != 4 || st.Preloaded != 4 || !slices.Equal(got, cold(t, m, prompt)) {
		t.Fatalf("first use of preloaded blocks: %+v, want 4 SSD hits, all preloaded", st)
	}
	if perf := fmt.Sprint(st.Perf()); !strings.Contains(perf, "block_hit 4") || !strings.Contains(perf, "block_preload 4") {
		t.Fatalf("PERF keys %s", perf)
	}
	// From then on they are RAM blocks like any other.
	got, st = serve(t, p2, m, prompt)
	if st.RAMHits != 4 || st.DiskHits != 0 || st.Preloaded != 0 || !slices.Equal(got, cold(t, m, prompt)) {
		t.Fatalf("second use: %+v, want 4 RAM hits", st)
	}
	if s := p2.Stats(); s.DiskHits != 4 || s.RAMHits != 4 {
		t.Fatalf("cache counters %+v", s)
	}
}

func TestPrefixModelKey(t *testing.T) {
	m1 := fakeModel{kinds: []string{"k8v4", "fp16"}}.newSeq(t)
	m2 := fakeModel{kinds: []string{"k4v4", "fp16"}}.newSeq(t)
	k1, _ := NewModelKey("a", m1)
	k2, _ := NewModelKey("a", m2)
	k3, _ := NewModelKey("b", m1)
	if k1 == k2 || k1 == k3 {
		t.Fatal("model keys do not cover the spec and the checkpoint")
	}
	k4, _ := NewModelKey("a", fakeModel{kinds: []string{"k8v4h", "fp16"}}.newSeq(t))
	if k4 == k1 {
		t.Fatal("model keys do not cover the rotation")
	}
	// Unrotated layers keep the key they had before rotation existed, so that blocks
	// already on SSD stay valid.
	if d, _ := describeLayer(m1.Layers[0]); d != "full h2 k64 v32 {Mode:1 Bits:8 Group:64}/{Mode:1 Bits:4 Group:32} start0" {
		t.Fatalf("an unrotated layer describes as %q", d)
	}
	// A rotated block is never restored into an unrotated cache, nor the reverse.
	rot, plain := fakeModel{kinds: []string{"k8v4h"}}.newSeq(t), fakeModel{kinds: []string{"k8v4"}}.newSeq(t)
	fill(t, rot, tokensOf(7, 300), 0, 300)
	fill(t, plain, tokensOf(7, 300), 0, 300)
	for _, c := range [][2]Layer{{rot.Layers[0], plain.Layers[0]}, {plain.Layers[0], rot.Layers[0]}} {
		pg, _ := c[0].(*Quantized).exportPage(0)
		empty, _ := NewQuantized(fHeads, fKDim, fVDim, c[1].(*Quantized).spec, 0)
		if err := empty.importPages([]*page{pg}); err == nil {
			t.Fatalf("a %v block restored into a %v cache", c[0].(*Quantized).spec, c[1].(*Quantized).spec)
		}
	}
	f, _ := NewFull(2, 64, 64, true)
	if _, err := NewModelKey("a", Seq{Layers: []Layer{f}}); err == nil {
		t.Fatal("a float32 cache got a model key")
	}
	if ChainHash(Hash{}, k1, []int32{1, 2}) == ChainHash(Hash{}, k2, []int32{1, 2}) {
		t.Fatal("chain hash ignores the model key")
	}
	// A chain break: the first block differs from everything cached for this model.
	p, _ := NewPrefixCache(PrefixConfig{Log: quietLog()})
	m := fakeModel{kinds: []string{"fp16"}}
	serve(t, p, m, tokensOf(60, 300))
	if _, st := serve(t, p, m, tokensOf(61, 300)); !st.ChainBreak {
		t.Fatalf("%+v: no chain break", st)
	}
}

func TestCheckpointIdentity(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) { os.WriteFile(filepath.Join(dir, name), data, 0o644) }
	write("config.json", []byte(`{}`))
	w := bytes.Repeat([]byte{1}, 1<<20)
	write("model.safetensors", w)
	a, err := CheckpointIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	w[700000] = 2 // a different fine-tune: same size, other bytes
	write("model.safetensors", w)
	b, _ := CheckpointIdentity(dir)
	if a == b {
		t.Fatal("identity ignores the weights")
	}
	// A Hugging Face cache link names the blob's digest.
	blob := filepath.Join(t.TempDir(), strings.Repeat("ab", 32))
	os.WriteFile(blob, w, 0o644)
	os.Remove(filepath.Join(dir, "model.safetensors"))
	os.Symlink(blob, filepath.Join(dir, "model.safetensors"))
	c, _ := CheckpointIdentity(dir)
	if c == b || c == "" {
		t.Fatal("blob link not used")
	}
	if _, err := CheckpointIdentity(t.TempDir()); err == nil {
		t.Fatal("an empty folder has an identity")
	}
}

// TestPrefixKilledWriter runs a child process that writes blocks as fast as it can,
// kills it with SIGKILL mid-write three times, and checks that every block file left
// verifies and a restart removes the temporary files.
func TestPrefixKilledWriter(t *testing.T) {
	if dir := os.Getenv("MLXG_PREFIX_KILL_CHILD"); dir != "" {
		m := fakeModel{kinds: []string{"k8v4", "fp16"}}
		p, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
		for i := uint64(0); ; i++ {
			serve(t, p, m, tokensOf(1000+i, 1100))
		}
	}
	dir := t.TempDir()
	for round := range 3 {
		killChild(t, dir, round)
	}
	files, _ := os.ReadDir(dir)
	if len(files) == 0 {
		t.Fatal("the child wrote nothing")
	}
	ok, removed, err := VerifyDisk(dir, quietLog())
	if err != nil || removed != 0 || ok == 0 {
		t.Fatalf("after kill -9: %d blocks verify, %d removed, %v", ok, removed, err)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", ".*tmp-*"))
	t.Logf("%d blocks verify, %d temporary files left by the killed writer", ok, len(tmps))
	p, err := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()}) // a restart removes them
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	all, _ := filepath.Glob(filepath.Join(dir, "*", ".*tmp-*"))
	if len(all) != 0 {
		t.Fatalf("temporary files left: %v", all)
	}
}

func killChild(t *testing.T, dir string, round int) {
	t.Helper()
	cmd := testChild(t, "TestPrefixKilledWriter", "MLXG_PREFIX_KILL_CHILD="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until it has written a few blocks past the ones already there, then kill it.
	before := len(blockFilesQuiet(dir))
	for i := 0; i < 2000 && len(blockFilesQuiet(dir)) < before+3+round; i++ {
		sleepMs(5)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(blockFilesQuiet(dir)) <= before {
		t.Fatalf("round %d: the child wrote no block", round)
	}
}

func blockFilesQuiet(dir string) []diskFile {
	f, _ := listFiles(dir, false)
	return f
}

func sleepMs(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

// testChild runs this test binary again for one test, with an environment variable.
func testChild(t *testing.T, test, env string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env)
	return cmd
}

func TestPrefixOptions(t *testing.T) {
	var o PrefixOptions
	if err := o.Set("block-ssd-cache-max-size", "2.5", "--block-ssd-cache-max-size"); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MLXG_PREFIX_DIR": "/x/prefix", "MLXG_PREFIX_MAX_SIZE": "7", "MLXG_PROMPT_CACHE_HOT": "3"}
	if err := o.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config(nil)
	if err != nil || cfg.Dir != "/x/prefix" || cfg.MaxDiskBytes != 2.5e9 || cfg.Hot != 3 {
		t.Fatalf("%+v %v: the flag must win over MLXG_PREFIX_MAX_SIZE", cfg, err)
	}
	if err := o.Set("prompt-cache-hot", "many", "--prompt-cache-hot"); err == nil || !strings.Contains(err.Error(), "prompt-cache-hot") {
		t.Fatalf("bad value accepted or error unnamed: %v", err)
	}
	var d PrefixOptions
	cfg, _ = d.Config(nil)
	if !strings.HasSuffix(cfg.Dir, filepath.Join(".cache", "mlxg", "prefix")) || cfg.Hot != DefaultPrefixHot || cfg.MaxDiskBytes != DefaultPrefixMaxGB*1e9 {
		t.Fatalf("defaults: %+v", cfg)
	}
	d.Dir = "off"
	if cfg, _ = d.Config(nil); cfg.Dir != "" {
		t.Fatal("off kept an SSD tier")
	}
}

// TestPrefixSharedFolder: two caches (two servers) write the same and different blocks to
// one folder at once, one of them evicting under a cap; every file left verifies and both
// read each other's blocks.
func TestPrefixSharedFolder(t *testing.T) {
	m := fakeModel{kinds: []string{"k8v4"}}
	dir := t.TempDir()
	a, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	b, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog(), MaxDiskBytes: 1 << 30})
	done := make(chan bool)
	for _, p := range []*PrefixCache{a, b} {
		go func() {
			for i := range 6 {
				serve(t, p, m, tokensOf(uint64(70+i), 600))
			}
			p.Flush()
			done <- true
		}()
	}
	<-done
	<-done
	a.Close()
	b.Close()
	ok, removed, err := VerifyDisk(dir, quietLog())
	if err != nil || removed != 0 || ok != 18 {
		t.Fatalf("%d ok, %d removed, %v; want 18 blocks (6 prompts of 2 full blocks and a partial)", ok, removed, err)
	}
	c, _ := NewPrefixCache(PrefixConfig{Dir: dir, Log: quietLog()})
	defer c.Close()
	if _, st := serve(t, c, m, tokensOf(75, 600)); st.DiskHits != 3 {
		t.Fatalf("%+v", st)
	}
}
