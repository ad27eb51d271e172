package mlxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// EnvRank marks a test process that Ranks started as one rank of a group; its value
// is the rank. MLX itself reads MLX_RANK and MLX_HOSTFILE, which Ranks sets too.
const EnvRank = "MLXG_TEST_RANK"

// Rank reports whether this test process is a rank that Ranks started, and which.
func Rank() (int, bool) {
	v := os.Getenv(EnvRank)
	if v == "" {
		return 0, false
	}
	r, err := strconv.Atoi(v)
	return r, err == nil
}

// Hostfile writes an MLX ring hostfile of n loopback addresses on free ports into dir
// and returns its path.
func Hostfile(t testing.TB, dir string, n int) string {
	t.Helper()
	hosts := make([][]string, n)
	for i := range hosts {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = []string{l.Addr().String()}
		l.Close()
	}
	data, _ := json.Marshal(hosts)
	path := filepath.Join(dir, "hostfile.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Ranks runs the test named run as n processes of this test binary, ranks 0..n-1 of
// an MLX ring over loopback (MLX_RANK, MLX_HOSTFILE), with env added, and fails t
// with the output of any that fails or outlives timeout. It returns each rank's
// output. A rank tells Ranks apart from a plain run with Rank.
func Ranks(t *testing.T, n int, run string, timeout time.Duration, env ...string) []string {
	t.Helper()
	Lib(t) // skip (or fail) here, not in every rank, when there is no libmlxc
	hostfile := Hostfile(t, t.TempDir(), n)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	outs := make([]bytes.Buffer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+run+"$", "-test.count=1", "-test.v")
		cmd.Env = append(append(os.Environ(), env...),
			EnvRank+"="+strconv.Itoa(r), "MLX_RANK="+strconv.Itoa(r), "MLX_HOSTFILE="+hostfile)
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cmd.Wait()
			if errs[r] != nil {
				cancel() // a failed rank leaves its peers blocked in MLX: stop them
			}
		}()
	}
	wg.Wait()
	res := make([]string, n)
	for r := range res {
		res[r] = outs[r].String()
		if errs[r] != nil {
			t.Errorf("rank %d: %v (timeout %v)\n%s", r, errs[r], timeout, res[r])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return res
}

// Result prints a rank's result for Ranks' caller to parse with Results.
func Result(key string, v any) {
	data, _ := json.Marshal(v)
	fmt.Printf("RESULT %s %s\n", key, data)
}

// Results decodes what a rank printed with Result under key into v.
func Results(t testing.TB, out, key string, v any) {
	t.Helper()
	for _, line := range bytes.Split([]byte(out), []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("RESULT "+key+" ")); ok {
			if err := json.Unmarshal(rest, v); err != nil {
				t.Fatalf("result %s: %v", key, err)
			}
			return
		}
	}
	t.Fatalf("no result %s in:\n%s", key, out)
}
