package server

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/runner/sched"
)

// Client.CreateBlob and Client.Create against a server: what mlxg create -f sends.
func TestClientCreate(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	u, _ := url.Parse(ts.URL)
	c := api.NewClient(u, nil)
	ctx := context.Background()
	data := []byte("blob")
	if err := c.CreateBlob(ctx, blobDigest(data), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var se api.StatusError
	if err := c.CreateBlob(ctx, blobDigest([]byte("x")), bytes.NewReader(data)); !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.ErrorMessage, "digest mismatch") {
		t.Errorf("a mismatched blob: %v", err)
	}
	req, _, err := api.ParseModelfile(strings.NewReader("FROM scripted\nPARAMETER stop Paris\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req.Model = "viaclient"
	var last api.ProgressResponse
	if err := c.Create(ctx, req, func(p api.ProgressResponse) error { last = p; return nil }); err != nil || last.Status != "success" {
		t.Fatalf("create: %v, last %+v", err, last)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: "viaclient"})
	if err != nil || !strings.Contains(show.Parameters, `"Paris"`) {
		t.Errorf("show: %+v, %v", show, err)
	}
}

// linkOrCopy copies where a hard link cannot be made (another filesystem: /dev/shm is tmpfs on Linux).
func TestLinkOrCopyAcrossDisks(t *testing.T) {
	src := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(src, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.MkdirTemp("/dev/shm", "mlxg-link-")
	if err != nil {
		t.Skip("no /dev/shm here to stand for another disk")
	}
	defer os.RemoveAll(other)
	dst := filepath.Join(other, "model.safetensors")
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "weights" {
		t.Fatalf("copy: %q, %v", b, err)
	}
	same := filepath.Join(filepath.Dir(src), "linked")
	if err := linkOrCopy(src, same); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(src)
	b, _ := os.Stat(same)
	if !os.SameFile(a, b) {
		t.Error("on one disk the blob was copied, not linked")
	}
}
