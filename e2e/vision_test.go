package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// visModel is a tiny random Qwen3.5 with a vision tower (registry/randmodel: GenerateQwen35 with
// TinyQwenVision, 8×8 pixels a token), created in the server's store by `mlxg create` from its MLX
// conversion. Its replies are random text; what the tests check is that an image reaches the tower
// (the PERF line's image tokens) and that an answer streams back.
const visModel = "vis"

// visionTemplate renders content parts as Qwen3.5's chat template does: an image part as
// <|vision_start|><|image_pad|><|vision_end|> where it stands among the text parts.
const visionTemplate = `{%- for message in messages -%}<|im_start|>{{ message.role }}
{% if message.content is string %}{{ message.content }}{% else %}{% for item in message.content %}{% if item.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>
{% endfor -%}{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}`

var (
	visOnce sync.Once
	visErr  error
)

// startVision is the e2e server with visModel created in its store (once per test binary).
func startVision(t *testing.T) *server {
	t.Helper()
	tok := testdata.Tokenizer(t, "qwen3")
	s := start(t)
	visOnce.Do(func() { visErr = createVisionModel(t, s, tok) })
	if visErr != nil {
		t.Log(s.logTail())
		t.Fatal(visErr)
	}
	return s
}

func createVisionModel(t *testing.T, s *server, tokDir string) error {
	hf, mlx := filepath.Join(s.tmp, "vis-hf"), filepath.Join(s.tmp, "vis-mlx")
	c := randmodel.TinyQwen3Next(151936)
	c.TieWordEmbeddings = true
	v := randmodel.TinyQwenVision()
	if err := randmodel.GenerateQwen35(hf, c, &v, randmodel.Options{Seed: 3, TokenizerDir: tokDir}); err != nil {
		return err
	}
	path := filepath.Join(hf, "tokenizer_config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var tc map[string]any
	if err := json.Unmarshal(raw, &tc); err != nil {
		return err
	}
	tc["chat_template"] = visionTemplate
	if raw, err = json.Marshal(tc); err != nil {
		return err
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	if _, err := create.Convert(t.Context(), hf, mlx, create.Options{}); err != nil {
		return err
	}
	// A short greedy reply: `ollama run` takes its options from the model.
	mf := filepath.Join(s.tmp, "vis.Modelfile")
	if err := os.WriteFile(mf, fmt.Appendf(nil, "FROM %s\nPARAMETER num_predict 12\nPARAMETER temperature 0\n", mlx), 0o644); err != nil {
		return err
	}
	if out, err := s.mlxg(t, "", "create", visModel, "-f", mf); err != nil {
		return fmt.Errorf("mlxg create %s: %v\n%s", visModel, err, out)
	}
	return nil
}

// writePNG writes a w×h PNG whose pixels depend on seed into dir and returns its path.
func writePNG(t *testing.T, dir, name string, w, h int, seed uint8) string {
	t.Helper()
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, color.NRGBA{uint8(x*5) + seed, uint8(y*11) ^ seed, uint8(x*y) + seed, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// perfImages waits for the server's PERF line of a visModel request whose image filled tokens rows,
// and returns it: the image went through the tower (images_encoded=1) and its rows into the prompt.
func (s *server) perfImages(t *testing.T, tokens int) string {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`PERF: model=%s\S* .*\bimages=1 image_tokens=%d images_encoded=1 encode_ms=\d+`, visModel, tokens))
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(s.logPath)
		if m := re.Find(b); m != nil {
			return string(m)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PERF line of %s with an image of %d tokens\n%s", visModel, tokens, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVisionOllamaCLI: the real `ollama run vis "what is in ./x.png"` (the CLI sees vision in /api/show,
// attaches the file it names and sends it in images) gets a streamed answer, and the server encoded the
// image: 96×64 pixels are 12×8 tokens of 8×8.
func TestVisionOllamaCLI(t *testing.T) {
	bin := ollamaCLI(t)
	s := startVision(t)
	rec := newRecorder(t, s)
	dir := t.TempDir()
	writePNG(t, dir, "x.png", 96, 64, 1)
	env := isolatedEnv(t.TempDir(), "OLLAMA_HOST="+strings.TrimPrefix(rec.URL, "http://"), "OLLAMA_NOHISTORY=1")
	stdout, stderr, err := runClient(t, 3*time.Minute, dir, env, "", bin, "run", visModel, "what is in ./x.png")
	stdout, stderr = ansi.ReplaceAllString(stdout, ""), ansi.ReplaceAllString(stderr, "")
	if err != nil {
		t.Fatalf("ollama run: %v\nstdout: %s\nstderr: %s\nexchanges:\n%s", err, clip(stdout, 2000), clip(stderr, 2000), rec.summary())
	}
	if !strings.Contains(stderr, "Added image './x.png'") {
		t.Errorf("the CLI did not attach the image (stderr %q)", clip(stderr, 500))
	}
	gen := rec.to("/api/generate")
	if len(gen) == 0 {
		t.Fatalf("no /api/generate request:\n%s", rec.summary())
	}
	var req struct {
		Prompt string   `json:"prompt"`
		Images []string `json:"images"`
	}
	last := gen[len(gen)-1]
	if err := json.Unmarshal(last.Body, &req); err != nil || len(req.Images) != 1 || strings.Contains(req.Prompt, "x.png") || last.Status != 200 {
		t.Fatalf("the CLI's request (%d): prompt %q, %d images (%v)", last.Status, req.Prompt, len(req.Images), err)
	}
	// The answer streamed: NDJSON lines, the last done.
	lines := strings.Split(strings.TrimSpace(string(last.Resp)), "\n")
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-1], `"done":true`) {
		t.Errorf("the answer was not streamed: %q", clip(string(last.Resp), 500))
	}
	if strings.TrimSpace(stdout) == "" {
		t.Errorf("ollama run printed nothing (stderr %q)", clip(stderr, 500))
	}
	t.Logf("ollama run: %q; %s", clip(strings.TrimSpace(stdout), 200), s.perfImages(t, 96))
}

// TestVisionNodeClients: openai-node's chat completions with an image_url data URL and the Anthropic
// SDK's messages with a base64 image block (scripts/clienttest/vision.cjs), both streamed; the server
// encoded each image: 64×48 pixels are 48 tokens, 80×48 are 60.
func TestVisionNodeClients(t *testing.T) {
	nm := filepath.Join(testdata.Dir(), "clients", "node_modules")
	for _, pkg := range []string{"@anthropic-ai/sdk", "openai"} {
		requireAsset(t, "npm package "+pkg, filepath.Join(nm, filepath.FromSlash(pkg), "package.json"))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the client tests need Node.js")
	}
	s := startVision(t)
	dir := t.TempDir()
	cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "vision.cjs"))
	cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+visModel,
		"MLXG_OPENAI_IMAGE="+writePNG(t, dir, "a.png", 64, 48, 2), "MLXG_ANTHROPIC_IMAGE="+writePNG(t, dir, "b.png", 80, 48, 3))
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Log(s.logTail())
		t.Fatalf("node clients: %v", err)
	}
	t.Log(s.perfImages(t, 48))
	t.Log(s.perfImages(t, 60))
}
