package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/memcgroup"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// cappedMoE is a random qwen3_moe with Qwen-like routing and Qwen's tokenizer, about 390 MB
// of MLX 4-bit weights (24 layers of 64 experts, top 8), made once per test binary and
// removed by TestMain.
var cappedMoE struct {
	once sync.Once
	root string
	dir  string
	size int64
	err  error
}

func cappedMoEDir(t *testing.T) (string, int64) {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	cappedMoE.once.Do(func() {
		root, err := os.MkdirTemp("", "mlxg-capped-moe-")
		if err != nil {
			cappedMoE.err = err
			return
		}
		cappedMoE.root = root
		hf, out := filepath.Join(root, "hf"), filepath.Join(root, "mlx")
		cfg := randmodel.Config{Arch: "qwen3_moe", VocabSize: 151936, HiddenSize: 256, IntermediateSize: 512, NumLayers: 24,
			NumHeads: 4, NumKVHeads: 2, HeadDim: 64, MaxPositions: 4096, RopeTheta: 1e6, RMSNormEps: 1e-6, DType: "bfloat16",
			NumExperts: 64, TopK: 8, MoEIntermediate: 512, NormTopK: true, Routing: "qwen"}
		if cappedMoE.err = randmodel.Generate(hf, cfg, randmodel.Options{Seed: 3, TokenizerDir: tok}); cappedMoE.err != nil {
			return
		}
		if _, cappedMoE.err = create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 64}); cappedMoE.err != nil {
			return
		}
		os.RemoveAll(hf)
		files, _ := filepath.Glob(filepath.Join(out, "*.safetensors"))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				cappedMoE.size += fi.Size()
			}
		}
		cappedMoE.dir = out
	})
	if cappedMoE.err != nil {
		t.Fatal(cappedMoE.err)
	}
	return cappedMoE.dir, cappedMoE.size
}

// underCgroup runs the test binary as the mlxg command with args, in a memory cgroup of
// limit bytes that only it joins (a shell moves itself there and execs it). It skips the
// test where no cgroup can be made.
func underCgroup(t *testing.T, limit int64, args ...string) (*exec.Cmd, *memcgroup.Cgroup) {
	t.Helper()
	cg, err := memcgroup.New(limit)
	if err != nil {
		t.Skipf("no memory cgroup for the capped run (root and a writable cgroup file system are needed): %v", err)
	}
	t.Cleanup(func() {
		if err := cg.Remove(); err != nil {
			t.Error(err)
		}
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$1" && shift && exec "$@"`, "sh", cg.Procs, exe}, args...)...)
	cmd.Env = append(os.Environ(), "MLXG_TEST_AS_CLI=1")
	return cmd, cg
}

// TestStreamUnderCgroup: a mixture-of-experts model larger than a memory cgroup's limit
// streams its experts through both paths, `mlxg run DIR` in its own process and `mlxg
// serve`, planned by the same loader from the memory the limit leaves; neither is killed,
// and both write the text the model writes from memory without a limit.
func TestStreamUnderCgroup(t *testing.T) {
	if testing.Short() {
		t.Skip("generates and streams a 390 MB model")
	}
	dir, size := cappedMoEDir(t)
	cliEnv(t)
	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_KV_BITS", "(8, 8)") // the same KV layout whatever the memory
	t.Setenv("MLXG_WEIGHT_BUDGET", "")
	prompt := "The history of the quick brown fox"
	opts := []string{"--raw", prompt, "-o", "num_predict=16", "-o", "temperature=0", "-o", "repeat_penalty=1", "--num-draft", "0"}
	want, stderr, err := mlxg(t, append([]string{"run", dir, "--threads", "2"}, opts...)...)
	if err != nil || strings.TrimSpace(want) == "" || strings.Contains(stderr, "streams") {
		t.Fatalf("uncapped: %v %q\n%s", err, want, stderr)
	}
	limit := size * 4 / 5 // below the weights

	t.Run("run", func(t *testing.T) {
		cmd, cg := underCgroup(t, limit, append([]string{"run", dir, "--threads", "2", "--verbose"}, opts...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		t.Log(errOut.String())
		t.Logf("mlxg run under a %d MB cap (weights %d MB): peak %d MB (%.0f%%), OOM kills %d", limit/1e6, size/1e6, cg.Peak()/1e6, 100*float64(cg.Peak())/float64(limit), cg.OOMKills())
		if err != nil {
			t.Fatalf("mlxg run under the cap: %v (OOM kills %d)\n%s", err, cg.OOMKills(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "it streams its experts") {
			t.Errorf("mlxg run did not stream:\n%s", errOut.String())
		}
		if out.String() != want {
			t.Errorf("streamed under the cap: %q, from memory: %q", out.String(), want)
		}
	})

	t.Run("serve", func(t *testing.T) {
		store, err := registry.DefaultStore()
		if err != nil {
			t.Fatal(err)
		}
		name, err := registry.ParseName("capped")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.ImportDir(context.Background(), name, dir); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		t.Setenv("MLXG_HOST", addr)
		cmd, cg := underCgroup(t, limit, "serve", "--threads", "2")
		var log bytes.Buffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		var waitErr error
		go func() { waitErr = cmd.Wait(); close(exited) }()
		defer func() {
			cmd.Process.Signal(os.Interrupt)
			<-exited
		}()
		for i := 0; ; i++ {
			if out, _, _ := mlxg(t, "version"); strings.Contains(out, "mlxg version is") {
				break
			}
			if i == 200 {
				t.Fatalf("mlxg serve did not answer at %s:\n%s", addr, log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		got, stderr, err := mlxg(t, append([]string{"run", "capped"}, opts...)...)
		peak := fmt.Sprintf("peak %d MB (%.0f%%) of a %d MB cap (weights %d MB), OOM kills %d", cg.Peak()/1e6, 100*float64(cg.Peak())/float64(limit), limit/1e6, size/1e6, cg.OOMKills())
		t.Log("mlxg serve: " + peak)
		if err != nil {
			t.Fatalf("through the capped server: %v\n%s\nserver log:\n%s", err, stderr, log.String())
		}
		if !strings.Contains(log.String(), "loading in streaming mode") {
			t.Errorf("the server did not stream:\n%s", log.String())
		}
		if got != want {
			t.Errorf("served under the cap: %q, from memory: %q", got, want)
		}
		select {
		case <-exited:
			t.Fatalf("the server exited: %v (%s)\n%s", waitErr, peak, log.String())
		default:
		}
	})
}
