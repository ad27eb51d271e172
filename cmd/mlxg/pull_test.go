package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
)

// A rate-limit countdown, one event a second, is one line in a log, not one line a second.
func TestPullRendererCountdown(t *testing.T) {
	var out bytes.Buffer
	r := newPullRenderer(&out, "org/m")
	events := []api.ProgressResponse{{Status: "pulling manifest"}}
	for _, s := range []string{"3s", "2s", "1s"} {
		events = append(events, api.ProgressResponse{Status: registry.RateLimitedStatus + " (HTTP 429): retrying in " + s})
	}
	events = append(events, api.ProgressResponse{Status: "pulling config.json", Digest: "abc", Total: 2, Completed: 2},
		api.ProgressResponse{Status: registry.RateLimitedStatus + " (HTTP 429): retrying in 9s"},
		api.ProgressResponse{Status: registry.RateLimitedStatus + " (HTTP 429): retrying in 8s"},
		api.ProgressResponse{Status: "success"})
	for _, e := range events {
		if err := r.event(e); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"pulling manifest", registry.RateLimitedStatus + " (HTTP 429): retrying in 3s", "pulling config.json: 2 B",
		registry.RateLimitedStatus + " (HTTP 429): retrying in 9s", "success"}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}
}
