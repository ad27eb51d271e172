// Command prefixbench measures the prefix cache: time to first token for a prompt
// computed cold, reused from the RAM tier, and reused from the SSD tier after a restart
// (a new process), for prompts made of a shared system prompt and a growing chat; then a
// fault run that kills a process writing blocks with SIGKILL, restarts, and checks that
// every block file left verifies and that truncated or garbled files are found and removed.
//
//	go run ./scripts/prefixbench [-model ../shared/models/qwen3-tiny] [-sizes 4096,16384] [-kills 20]
//
// The model is copied (links) with max_position_embeddings raised to fit the largest
// prompt. It runs on the CPU backend.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
)

var (
	modelDir = flag.String("model", "../shared/models/qwen3-tiny", "checkpoint (HF folder with tokenizer and chat template)")
	sizesArg = flag.String("sizes", "4096,16384", "prompt sizes in tokens")
	kills    = flag.Int("kills", 20, "kill -9 rounds of the fault run (0: none)")
	threads  = flag.Int("threads", 0, "CPU threads (0: all)")
	work     = flag.String("work", "", "working folder (default: a temporary one, removed)")
	phase    = flag.String("phase", "all", "all, or (run by all in child processes) cold, ssd, writer")
	cacheDir = flag.String("cache", "", "prefix cache folder (child phases)")
	seed     = flag.Uint64("seed", 0, "prompt seed of the writer phase")
)

func main() {
	flag.Parse()
	log.SetFlags(0)
	switch *phase {
	case "all":
		runAll()
	case "cold", "ssd":
		ttftPhase(*phase)
	case "writer":
		writer()
	default:
		log.Fatalf("unknown -phase %q", *phase)
	}
}

func sizes() []int {
	var out []int
	for _, s := range strings.Split(*sizesArg, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 512 {
			log.Fatalf("-sizes: %q is not a prompt size of 512 tokens or more", s)
		}
		out = append(out, n)
	}
	return out
}

// result is one request's measurement, passed from the child phases as JSON lines.
type result struct {
	Size     int     `json:"size"`
	Kind     string  `json:"kind"` // cold, ram, ssd
	TTFT     float64 `json:"ttft_s"`
	Prompt   int     `json:"prompt_tokens"`
	Cached   int     `json:"cached"`
	RAMHits  int     `json:"ram_hit"`
	DiskHits int     `json:"block_hit"`
}

func runAll() {
	dir := *work
	if dir == "" {
		d, err := os.MkdirTemp("", "prefixbench-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	model := longModel(filepath.Join(dir, "model"), slices.Max(sizes())+1024)
	cache := filepath.Join(dir, "prefix")
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	child := func(phase string, seed int) []result {
		cmd := exec.Command(self, "-phase", phase, "-model", model, "-cache", cache, "-sizes", *sizesArg, "-threads", strconv.Itoa(*threads),
			"-seed", strconv.Itoa(seed))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			log.Fatalf("phase %s: %v", phase, err)
		}
		var rs []result
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var r result
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				log.Fatalf("phase %s printed %q", phase, line)
			}
			rs = append(rs, r)
		}
		return rs
	}
	fmt.Fprintf(os.Stderr, "TTFT on %s (CPU, %d threads; 0 = all)\n", *modelDir, *threads)
	rs := child("cold", 0)
	for i := 1; i <= hits; i++ {
		rs = append(rs, child("ssd", i)...) // a new process each time: an empty RAM tier
	}
	fmt.Printf("\nTTFT: cold once; RAM and SSD hits the median of %d, each a new turn on the same conversation.\n", hits)
	fmt.Printf("\n| prompt tokens | cold TTFT | RAM hit TTFT | SSD hit after restart TTFT | cold / RAM | cold / SSD | reused tokens (RAM, SSD) |\n")
	fmt.Printf("|---|---|---|---|---|---|---|\n")
	for _, n := range sizes() {
		by := map[string][]result{}
		for _, r := range rs {
			if r.Size == n {
				by[r.Kind] = append(by[r.Kind], r)
			}
		}
		c, ram, ssd := median(by["cold"]), median(by["ram"]), median(by["ssd"])
		fmt.Printf("| %d | %.3f s | %.3f s | %.3f s | %.1fx | %.1fx | %d of %d, %d of %d (%d blocks read) |\n", c.Prompt, c.TTFT, ram.TTFT, ssd.TTFT,
			c.TTFT/ram.TTFT, c.TTFT/ssd.TTFT, ram.Cached, ram.Prompt, ssd.Cached, ssd.Prompt, ssd.DiskHits)
	}
	if *kills > 0 {
		faults(self, model, filepath.Join(dir, "fault"))
	}
}

// hits is how many times RAM and SSD hits are measured.
const hits = 3

func median(rs []result) result {
	if len(rs) == 0 {
		log.Fatal("a measurement is missing")
	}
	slices.SortFunc(rs, func(a, b result) int { return cmpFloat(a.TTFT, b.TTFT) })
	return rs[len(rs)/2]
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// longModel links the checkpoint's files into dir with max_position_embeddings raised to n.
func longModel(dir string, n int) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Fatal(err)
	}
	src, err := filepath.Abs(*modelDir)
	if err != nil {
		log.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		log.Fatalf("%v (pass -model)", err)
	}
	for _, e := range entries {
		if e.Name() == "config.json" {
			continue
		}
		os.Symlink(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()))
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		log.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		log.Fatal(err)
	}
	if cur, _ := cfg["max_position_embeddings"].(float64); int(cur) < n {
		cfg["max_position_embeddings"] = n
	}
	out, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644); err != nil {
		log.Fatal(err)
	}
	return dir
}

var words = strings.Fields(`the a cache block prompt agent tool call system user model token memory disk restart
server request reply answer question file folder read write check verify hash chain layer key value spec bits group
quick brown fox jumps over lazy dog river mountain city night morning coffee paper letter number table window door`)

func text(r *rand.Rand, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// chat is a system prompt of about half the size, then user/assistant turns until the
// rendered prompt reaches size tokens, ending with a user message.
func chat(e *runner.Engine, size int) []template.Message {
	r := rand.New(rand.NewPCG(uint64(size), 7))
	count := func(msgs []template.Message) int {
		s, err := e.Template.Apply(msgs, template.Options{AddGenerationPrompt: true})
		if err != nil {
			log.Fatal(err)
		}
		return len(e.Tokenizer.Encode(s, false))
	}
	msgs := []template.Message{{"role": "system", "content": text(r, size/2)}}
	for count(msgs) > size/2+64 { // words are about one token each; trim to half
		c := msgs[0]["content"].(string)
		msgs[0]["content"] = c[:len(c)*9/10]
	}
	for {
		user := template.Message{"role": "user", "content": text(r, 200)}
		if count(append(slices.Clone(msgs), user)) > size {
			last := template.Message{"role": "user", "content": text(r, 8)}
			if room := size - count(append(slices.Clone(msgs), last)); room > 16 {
				last["content"] = text(r, room*9/10) // about one token a word
			}
			return append(msgs, last)
		}
		msgs = append(msgs, user, template.Message{"role": "assistant", "content": text(r, 150)})
	}
}

func load(cache string, hot int) (*runner.Engine, *kvstore.PrefixCache) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: cache, Hot: hot, Log: quiet})
	if err != nil {
		log.Fatal(err)
	}
	e, err := runner.Load(*modelDir, runner.LoadOptions{Threads: *threads, Prefix: pc, Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}
	return e, pc
}

func request(e *runner.Engine, msgs []template.Message) *runner.Result {
	o := runner.Greedy()
	o.NumPredict = 1
	o.NumCtx = e.Model.Config.MaxPositions
	res, err := e.Generate(context.Background(), runner.Request{Messages: msgs, Options: o}, nil)
	if err != nil {
		log.Fatal(err)
	}
	return res
}

// ttftPhase: "cold" measures each size's conversation cold, then with one more turn (a
// RAM hit of the first request's prompt), three times with three turns; "ssd", in a
// fresh process, the same conversation with another new turn (an SSD hit: nothing is
// loaded at start-up). Each process first warms up on a short unrelated prompt.
func ttftPhase(kind string) {
	e, pc := load(*cacheDir, 0)
	defer pc.Close()
	request(e, []template.Message{{"role": "user", "content": "Hello there."}})
	enc := json.NewEncoder(os.Stdout)
	for _, n := range sizes() {
		base := chat(e, n)
		reply := template.Message{"role": "assistant", "content": "Noted."}
		next := func(s string) []template.Message {
			return append(slices.Clone(base), reply, template.Message{"role": "user", "content": s})
		}
		measure := func(kind string, msgs []template.Message) {
			start := time.Now()
			res := request(e, msgs)
			ttft := time.Since(start).Seconds()
			st := res.Prefix
			enc.Encode(result{Size: n, Kind: kind, TTFT: ttft, Prompt: res.PromptTokens, Cached: st.Cached, RAMHits: st.RAMHits, DiskHits: st.DiskHits})
			fmt.Fprintf(os.Stderr, "  %5d tokens %-4s TTFT %.3f s, %d reused (%d RAM blocks, %d SSD blocks)\n", res.PromptTokens, kind, ttft, st.Cached, st.RAMHits, st.DiskHits)
		}
		if kind == "cold" {
			measure("cold", base)
			for i := 1; i <= hits; i++ {
				measure("ram", next(fmt.Sprintf("And what about river %d?", i)))
			}
		} else {
			measure("ssd", next(fmt.Sprintf("And what about mountain %d?", *seed)))
		}
	}
	pc.Flush()
}

// writer serves random chats forever (until killed), each writing its blocks.
func writer() {
	e, pc := load(*cacheDir, 0)
	defer pc.Close()
	for i := uint64(0); ; i++ {
		r := rand.New(rand.NewPCG(*seed, i))
		request(e, []template.Message{{"role": "system", "content": text(r, 1200)}, {"role": "user", "content": text(r, 30)}})
	}
}

// tempFiles lists the SSD tier's temporary files: blocks being written.
func tempFiles(dir string) []string {
	t, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
	return t
}

// faults kills a writer process with SIGKILL while it writes a block (0-5 ms after the
// temporary file of its k-th block appears, k random in 1..12), restarts, and checks the folder
// each time: the temporary files it left are removed at start-up, every block file
// verifies, and a truncated and a garbled file are found and removed.
func faults(self, model, dir string) {
	r := rand.New(rand.NewPCG(42, 42))
	fmt.Printf("\nFault run: %d rounds of kill -9 while writing blocks, then restart and verify.\n\n", *kills)
	fmt.Printf("| round | killed after | block files | temp files at the kill | verify after restart | planted bad files found and removed |\n|---|---|---|---|---|---|\n")
	totalBad := 0
	for round := 1; round <= *kills; round++ {
		cmd := exec.Command(self, "-phase", "writer", "-model", model, "-cache", dir, "-threads", strconv.Itoa(*threads), "-seed", strconv.Itoa(round))
		cmd.Stderr = os.Stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		seen, k := map[string]bool{}, 1+r.IntN(12) // killed while writing its k-th block
		for len(seen) < k && time.Since(start) < time.Minute {
			for _, t := range tempFiles(dir) {
				seen[t] = true
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(time.Duration(r.IntN(5000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		after := time.Since(start)
		cmd.Wait()
		tmps := tempFiles(dir)
		blocks, _, _, _ := kvstore.DiskUsage(dir)
		// Restart: opening the cache cleans up; then verify every file.
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: dir, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
		if err != nil {
			log.Fatal(err)
		}
		pc.Close()
		left, _ := filepath.Glob(filepath.Join(dir, "*", ".*.tmp-*"))
		ok, removed, err := kvstore.VerifyDisk(dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
		if err != nil {
			log.Fatal(err)
		}
		// Plant a truncated and a garbled file, and check that verification removes exactly those.
		files, _ := filepath.Glob(filepath.Join(dir, "*", "*.safetensors"))
		planted := 0
		if len(files) >= 2 {
			a, b := files[r.IntN(len(files))], files[r.IntN(len(files))]
			for b == a {
				b = files[r.IntN(len(files))]
			}
			raw, _ := os.ReadFile(a)
			os.WriteFile(a, raw[:len(raw)*2/3], 0o644)
			raw, _ = os.ReadFile(b)
			raw[len(raw)-1-r.IntN(len(raw)/2)] ^= 0x10
			os.WriteFile(b, raw, 0o644)
			planted = 2
		}
		ok2, found, _ := kvstore.VerifyDisk(dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
		status := fmt.Sprintf("%d of %d verify", ok, ok+removed)
		if removed > 0 || len(left) > 0 {
			status += fmt.Sprintf(" — FAIL: %d bad, %d temp files kept", removed, len(left))
		}
		if found != planted || ok2 != ok-planted {
			status += fmt.Sprintf(" — FAIL: %d of %d planted found", found, planted)
		}
		totalBad += removed
		fmt.Printf("| %d | %.1f s | %d | %d | %s | %d of %d |\n", round, after.Seconds(), blocks, len(tmps), status, found, planted)
	}
	if totalBad > 0 {
		fmt.Printf("\nFAIL: %d block files left by killed writers did not verify\n", totalBad)
		os.Exit(1)
	}
}
