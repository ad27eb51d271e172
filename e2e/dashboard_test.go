package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mlxg/mlxg/internal/testdata"
)

// browser starts headless Chromium with a fresh profile and collects console errors, uncaught exceptions and
// browser log errors (CSP violations, failed loads) of every page it shows.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	dir    string // screenshots
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
			t.Fatal("chromium is missing (scripts/test installs it: apt-get install chromium)")
		}
		t.Skip("chromium is missing")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{ctx: ctx, dir: os.Getenv("MLXG_E2E_ARTIFACTS")}
	if b.dir == "" {
		b.dir = t.TempDir()
	} else if err := os.MkdirAll(b.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Console subscribes before the first page loads, so no message is lost; it starts the browser.
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			switch m.Type {
			case chromedp.ConsoleError, chromedp.ConsoleWarning, chromedp.ConsoleException, "assert":
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line+1))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) run(t *testing.T, what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.shot(t, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.dir, t.Name()[strings.LastIndex(t.Name(), "/")+1:]+"-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

func (b *browser) noErrors(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(b.errors, "\n"))
	}
}

// poll evaluates expr until it is true.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))
}

func evalJS[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// tinyName is the name the server lists the tiny model under.
func tinyName(t *testing.T, s *server) string {
	t.Helper()
	var tags struct {
		Models []struct{ Name string } `json:"models"`
	}
	getJSON(t, s.base+"/api/tags", &tags)
	for _, m := range tags.Models {
		if strings.HasPrefix(m.Name, tinyModel) {
			return m.Name
		}
	}
	t.Fatalf("%s is not in /api/tags: %+v", tinyModel, tags)
	return ""
}

// TestDashboard drives the dashboard and the chat page in headless Chromium against the running server and
// qwen3-tiny: no console errors or exceptions, the KV plan drawn as one bar per layer labelled as /api/ps spells
// the layout, throughput and recent requests updated by a request, and a chat reply streamed then stopped.
func TestDashboard(t *testing.T) {
	s := startTiny(t) // the agents' pass only: the HTTP surface is the same on every pass
	name := tinyName(t, s)
	b := newBrowser(t)

	t.Run("dashboard", func(t *testing.T) {
		b.run(t, "open dashboard", 30*time.Second,
			chromedp.Navigate(s.base+"/dashboard"),
			poll(`document.querySelector('#conn').textContent.startsWith('live')`))
		b.shot(t, "idle")

		// A request loads the model; the page follows it live.
		done := make(chan error, 1)
		go func() {
			body, _ := json.Marshal(map[string]any{"model": name, "prompt": "Once upon a time", "stream": true,
				"options": map[string]any{"num_predict": 48, "seed": 1}})
			resp, err := http.Post(s.base+"/api/generate", "application/json", bytes.NewReader(body))
			if err == nil {
				_, err = readAllErr(resp)
			}
			done <- err
		}()
		sel := fmt.Sprintf(`.plan[data-model=%q] .bar`, name)
		b.run(t, "KV plan bars", 60*time.Second, poll(fmt.Sprintf(`document.querySelectorAll(%q).length > 0`, sel)))
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		b.run(t, "recent request row and throughput", 30*time.Second, poll(fmt.Sprintf(
			`[...document.querySelectorAll('#requests tbody tr:not(.perf) td:nth-child(2)')].some((td) => td.textContent === %q) &&
			 !document.querySelector('#throughput').textContent.includes('decode0.0 tok/s')`, name)))
		b.shot(t, "loaded")

		var st struct {
			Models []struct {
				Name    string `json:"name"`
				KVCache string `json:"kv_cache"`
				Plan    *struct {
					Layers []struct {
						Layer    int    `json:"layer"`
						Kind     string `json:"kind"`
						KBits    string `json:"k_bits"`
						VBits    string `json:"v_bits"`
						Boundary bool   `json:"boundary"`
					} `json:"layers"`
				} `json:"kv_plan"`
			} `json:"models"`
		}
		getJSON(t, s.base+"/api/status", &st)
		var ps struct {
			Models []struct {
				Name    string `json:"name"`
				KVCache string `json:"kv_cache"`
			} `json:"models"`
		}
		getJSON(t, s.base+"/api/ps", &ps)
		psKV := ""
		for _, m := range ps.Models {
			if m.Name == name {
				psKV = m.KVCache
			}
		}
		if psKV == "" {
			t.Fatalf("/api/ps has no KV string for %s: %+v", name, ps)
		}
		var layers int
		for _, m := range st.Models {
			if m.Name == name && m.Plan != nil {
				layers = len(m.Plan.Layers)
			}
		}
		var cfg struct {
			Layers int `json:"num_hidden_layers"`
		}
		raw, err := os.ReadFile(filepath.Join(testdata.SharedModel(t, tinyModel), "config.json"))
		if err != nil || json.Unmarshal(raw, &cfg) != nil {
			t.Fatal(err)
		}
		type bar struct {
			Layer string `json:"layer"`
			KV    string `json:"kv"`
			Label string `json:"label"`
			Title string `json:"title"`
			// Where the label is drawn: under its bar and inside the plan's box, clear of its neighbours.
			Below   bool `json:"below"`
			Inside  bool `json:"inside"`
			Overlap bool `json:"overlap"`
		}
		bars := evalJS[[]bar](t, b, fmt.Sprintf(`[...document.querySelectorAll(%q)].map((e) => ({layer: e.dataset.layer, kv: e.dataset.kv, label: e.querySelector('.bits').textContent, title: e.title,
			below: e.querySelector('.bits').getBoundingClientRect().top >= e.querySelector('.fill').getBoundingClientRect().bottom - 0.5,
			inside: e.querySelector('.bits').getBoundingClientRect().bottom <= e.parentElement.getBoundingClientRect().bottom + 0.5,
			overlap: (() => { const n = e.nextElementSibling; if (!n) return false; const a = e.querySelector('.bits').getBoundingClientRect(), b = n.querySelector('.bits').getBoundingClientRect(); return a.right > b.left + 0.5 && a.bottom > b.top && b.bottom > a.top; })()}))`, sel))
		if len(bars) != cfg.Layers || layers != cfg.Layers {
			t.Fatalf("%d bars, %d plan layers, the model has %d layers", len(bars), layers, cfg.Layers)
		}
		// /api/ps spells the base spec first ("K8/V4 g64", "fp16", "q4_0") and the boundary layers as
		// "boundary N@K/V"; every bar's label must be one of those.
		base := strings.Fields(strings.Split(psKV, ",")[0])[0]
		boundary := ""
		if m := regexp.MustCompile(`boundary \d+@(\S+)/(\S+?),`).FindStringSubmatch(psKV + ","); m != nil {
			boundary = "K" + m[1] + "/V" + m[2]
		}
		spell := func(l string) string { // the bar's K/V label as a spec name, when /api/ps would use one
			switch l {
			case "K16/V16":
				return "fp16"
			case "Kq4_0/Vq4_0":
				return "q4_0"
			}
			return l
		}
		for i, br := range bars {
			if br.Layer != fmt.Sprint(i) || br.Label != br.KV || !br.Below || !br.Inside || br.Overlap {
				t.Errorf("bar %d: %+v", i, br)
			}
			if br.Label == base || spell(br.Label) == base || (boundary != "" && br.Label == boundary) {
				continue
			}
			t.Errorf("bar %d labelled %q (%s); /api/ps says %q", i, br.Label, br.Title, psKV)
		}
		t.Logf("/api/ps kv_cache %q; bars %v", psKV, bars)
		b.noErrors(t)
	})

	t.Run("context and memory", func(t *testing.T) {
		// The same long prompt twice: the second's prefix comes from the prefix cache.
		long := strings.Repeat("The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill. ", 60)
		for i := range 2 {
			body, _ := json.Marshal(map[string]any{"model": name, "prompt": long + fmt.Sprint(i), "stream": false,
				"options": map[string]any{"num_predict": 8, "seed": 1}})
			resp, err := http.Post(s.base+"/api/generate", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readAllErr(resp); err != nil {
				t.Fatal(err)
			}
		}
		var st struct {
			Models []struct {
				Name          string `json:"name"`
				ContextLength int    `json:"context_length"`
				ContextReason string `json:"context_reason"`
				Used          *struct {
					Tokens   int   `json:"tokens"`
					KVBytes  int64 `json:"kv_bytes"`
					Restored int   `json:"restored"`
				} `json:"context_used"`
			} `json:"models"`
		}
		getJSON(t, s.base+"/api/status", &st)
		var ctxLen, restored int
		for _, m := range st.Models {
			if m.Name == name && m.Used != nil {
				ctxLen, restored = m.ContextLength, m.Used.Restored
				if !strings.Contains(m.ContextReason, "sized from memory") || m.Used.Tokens < 1000 || m.Used.KVBytes <= 0 || restored <= 0 {
					t.Errorf("/api/status for %s: context %d (%q), used %+v", name, m.ContextLength, m.ContextReason, *m.Used)
				}
			}
		}
		if ctxLen == 0 {
			t.Fatalf("/api/status has no context use for %s: %+v", name, st)
		}
		row := fmt.Sprintf(`#models tr[data-model=%q]`, name)
		b.run(t, "context cells", 30*time.Second, poll(fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r && r.querySelector('.restored').dataset.tokens === %q; })()`, row, fmt.Sprint(restored))))
		cells := evalJS[map[string]string](t, b, fmt.Sprintf(`(() => { const r = document.querySelector(%q); return {len: r.querySelector('.ctxlen').textContent, reason: r.querySelector('.ctxreason').textContent, used: r.querySelector('.used').textContent, held: r.querySelector('.held').textContent}; })()`, row))
		if cells["len"] != formatThousands(ctxLen) || !strings.Contains(cells["reason"], "sized from memory") ||
			!strings.Contains(cells["used"], "tokens") || !strings.Contains(cells["used"], "KV") {
			t.Errorf("context cells: %+v (context %d)", cells, ctxLen)
		}

		// The memory bar: every part drawn, the weights visible, the parts filling the bar's width.
		type seg struct {
			Part  string  `json:"part"`
			Width float64 `json:"width"`
			Bytes float64 `json:"bytes"`
		}
		segs := evalJS[[]seg](t, b, `[...document.querySelectorAll('#membar .seg')].map((e) => ({part: e.dataset.part, width: e.getBoundingClientRect().width, bytes: +e.dataset.bytes}))`)
		barW := evalJS[float64](t, b, `document.querySelector('#membar').clientWidth`)
		var sum float64
		parts := map[string]seg{}
		for _, sg := range segs {
			sum += sg.Width
			parts[sg.Part] = sg
		}
		if len(segs) != 5 || parts["weights"].Width < 3 || parts["weights"].Bytes <= 0 || parts["free"].Width <= 0 || sum < barW-2 || sum > barW+2 {
			t.Errorf("memory bar: %+v, %.1f px of %.1f", segs, sum, barW)
		}
		// The chart over time spans its width from the first seconds (no sliver at the right edge): painted
		// pixels in its leftmost and rightmost tenths of the plot.
		span := evalJS[[]float64](t, b, `(() => { const c = document.querySelector('#memchart'), g = c.getContext('2d'), d = g.getImageData(0, 0, c.width, c.height).data;
			const painted = (x0, x1) => { let n = 0; for (let x = Math.floor(x0); x < x1; x++) for (let y = 6; y < c.height - 18; y++) { const i = 4 * (y * c.width + x); if (d[i + 3] > 0 && !(d[i] > 220 && d[i + 1] > 220 && d[i + 2] > 220)) n++; } return n; };
			const left = 64, w = c.width - 8 - left; return [painted(left + 1, left + w / 10), painted(left + 9 * w / 10, left + w - 1)]; })()`)
		if len(span) != 2 || span[0] == 0 || span[1] == 0 {
			t.Errorf("memory chart painted pixels (left tenth, right tenth): %v", span)
		}
		// What mlxg holds, at its own scale: the weights take a readable share of that bar.
		mine := evalJS[[]seg](t, b, `[...document.querySelectorAll('#mlxgbar .seg')].map((e) => ({part: e.dataset.part, width: e.getBoundingClientRect().width, bytes: +e.dataset.bytes}))`)
		if len(mine) != 3 || mine[0].Part != "weights" || mine[0].Width < barW/10 {
			t.Errorf("mlxg's bar: %+v of %.1f px", mine, barW)
		}
		b.shot(t, "context")
		b.noErrors(t)
	})

	t.Run("chat", func(t *testing.T) {
		b.run(t, "open chat", 30*time.Second,
			chromedp.Navigate(s.base+"/dashboard/chat"),
			poll(fmt.Sprintf(`[...document.querySelectorAll('#model option')].some((o) => o.value === %q)`, name)),
			chromedp.SetValue(chromedp.CSS("#model"), name),
			chromedp.SetValue(chromedp.CSS("#num_predict"), "24"),
			chromedp.SetValue(chromedp.CSS("#seed"), "7"),
			chromedp.SetValue(chromedp.CSS("#prompt"), "Tell me a story about a cat."),
			chromedp.Click(chromedp.CSS("#go")),
			poll(`document.querySelectorAll('.msg.assistant[data-done]').length === 1`))
		reply := evalJS[map[string]string](t, b, `(() => { const m = document.querySelector('.msg.assistant'); return {content: m.querySelector('.content').textContent, thinking: m.querySelector('.thinking').textContent, perf: m.querySelector('.perf').textContent}; })()`)
		t.Logf("reply: %q thinking: %q perf: %q", reply["content"], reply["thinking"], reply["perf"])
		if reply["content"]+reply["thinking"] == "" || !strings.HasPrefix(reply["perf"], "PERF: model="+name) || !strings.Contains(reply["perf"], "gen_tok=") {
			t.Fatalf("reply: %+v", reply)
		}
		b.shot(t, "reply")

		// A long reply, stopped while it streams. The model may end it on its own before Stop is clicked: then
		// try again with another seed.
		for attempt := 0; ; attempt++ {
			n := 2 + attempt
			b.run(t, "long reply", 60*time.Second,
				chromedp.SetValue(chromedp.CSS("#num_predict"), "1500"),
				chromedp.SetValue(chromedp.CSS("#seed"), fmt.Sprint(100+attempt)),
				chromedp.SetValue(chromedp.CSS("#prompt"), "Write a very long story."),
				chromedp.Click(chromedp.CSS("#go")),
				poll(fmt.Sprintf(`(() => { const m = document.querySelectorAll('.msg.assistant')[%d]; return m && (m.querySelector('.content').textContent + m.querySelector('.thinking').textContent).length > 0; })()`, n-1)),
				chromedp.Click(chromedp.CSS("#stop")),
				poll(fmt.Sprintf(`document.querySelectorAll('.msg.assistant[data-done]').length === %d`, n)))
			perf := evalJS[string](t, b, fmt.Sprintf(`document.querySelectorAll('.msg.assistant')[%d].querySelector('.perf').textContent`, n-1))
			if perf == "stopped" {
				break
			}
			if attempt == 3 {
				t.Fatalf("the reply was never stopped: %q", perf)
			}
			t.Logf("the reply ended before Stop (%q); again", perf)
		}
		if d := evalJS[bool](t, b, `!document.querySelector('#go').disabled && document.querySelector('#stop').disabled`); !d {
			t.Error("Send/Stop buttons not reset after Stop")
		}
		b.shot(t, "stopped")
		// The server sees the abort and frees the model.
		deadline := time.Now().Add(20 * time.Second)
		for {
			var ps struct {
				Models []struct {
					Name   string `json:"name"`
					Active int    `json:"active"`
				} `json:"models"`
			}
			getJSON(t, s.base+"/api/status", &ps)
			busy := false
			for _, m := range ps.Models {
				busy = busy || (m.Name == name && m.Active > 0)
			}
			if !busy {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stopped request is still active on the server")
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.noErrors(t)
	})
}

// formatThousands writes n as the page's toLocaleString('en-US') does: 40,960.
func formatThousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func readAllErr(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err := buf.ReadFrom(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, buf.String())
	}
	return buf.Bytes(), err
}
