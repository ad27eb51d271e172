package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/runner/sched"
)

// BenchmarkStreamOverhead measures the server's cost per streamed token: 256 tokens of the scripted model
// through HTTP NDJSON streaming (parse, JSON, flush per token) against the same generation called on the
// loaded model directly. Run: go test -run XXX -bench StreamOverhead ./api/
func BenchmarkStreamOverhead(b *testing.B) {
	ts := newTestServer(b, sched.Config{})
	const body = `{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0,"num_predict":256}}`
	ts.post(b, "/api/generate", `{"model":"scripted"}`)
	b.Run("http", func(b *testing.B) {
		for b.Loop() {
			resp, err := http.Post(ts.URL+"/api/generate", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			buf := make([]byte, 64<<10)
			for {
				k, err := resp.Body.Read(buf)
				n += strings.Count(string(buf[:k]), "\n")
				if err != nil {
					break
				}
			}
			resp.Body.Close()
			if n != 257 {
				b.Fatalf("%d lines", n)
			}
		}
		b.ReportMetric(float64(256*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("direct", func(b *testing.B) {
		m := ts.srv.sched.Running()[0].Model.(*loaded)
		o := api.DefaultOptions()
		o.Temperature, o.NumPredict = 0, 256
		for b.Loop() {
			st, err := m.Generate(context.Background(), GenerateInput{Prompt: "zzzz", Options: o}, func(string) error { return nil })
			if err != nil || st.EvalTokens != 256 {
				b.Fatal(err, st.EvalTokens)
			}
		}
		b.ReportMetric(float64(256*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
}
