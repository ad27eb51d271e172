package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
	"github.com/mlxg/mlxg/runner/runnertest"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// qwen35Vision writes a tiny random Qwen3.5 with a tower (vocabulary 256: Gated
// DeltaNet layers 0-2, full attention with interleaved M-RoPE on layer 3), in Hugging
// Face's layout converted by create.
func qwen35Vision(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	hf, out := filepath.Join(tmp, "hf"), filepath.Join(tmp, "mlx")
	v := randmodel.TinyQwenVision()
	if err := randmodel.GenerateQwen35(hf, randmodel.TinyQwen3Next(256), &v, randmodel.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// gemma3Vision writes TinyGemma3 (4 layers, sliding and global in turn, a window of 8:
// shorter than an image's 16 tokens) with a random tower in mlx-vlm's layout.
func gemma3Vision(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gemma3v")
	if err := randmodel.Generate(dir, randmodel.TinyGemma3(256), randmodel.Options{Seed: 6}); err != nil {
		t.Fatal(err)
	}
	v := randmodel.TinyGemma3Vision()
	v.Image, v.BOI, v.EOI = 250, 251, 252
	if err := randmodel.AddGemma3Vision(dir, v, 9, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// gemma4Vision writes a tiny Gemma 4 of the E2B kind (per-layer inputs carried to rank
// 1) with a random tower and bidirectional image spans.
func gemma4Vision(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gemma4v")
	c := randmodel.TinyGemma4Multimodal(256)
	c.KVSharedLayers = 0
	if err := randmodel.Generate(dir, c, randmodel.Options{Seed: 7}); err != nil {
		t.Fatal(err)
	}
	if err := randmodel.AddGemma4Vision(dir, randmodel.TinyGemma4Vision(), 11, false); err != nil {
		t.Fatal(err)
	}
	return dir
}

// imageSeq is a sequence with its images attached to its caches (model.SetMedia).
func imageSeq(t *testing.T, m *model.Model, ids []int32, md *model.Media) model.Sequence {
	t.Helper()
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	model.SetMedia(caches, md)
	t.Cleanup(func() { model.SetMedia(caches, nil) })
	return model.Sequence{Tokens: ids, Caches: caches}
}

// imageRun prefills ids (images md) in two passes, cut after the first image's rows
// and two text tokens, every row's logits returned, then decodes steps tokens greedily:
// the decode positions follow the images (Qwen's rope delta).
func imageRun(t *testing.T, m *model.Model, ids []int32, md *model.Media, steps int) pipeRun {
	t.Helper()
	s := imageSeq(t, m, ids, md)
	cut := md.Spans[0].Start + md.Spans[0].N() + 2
	var r pipeRun
	var logits []float32
	for _, part := range [][]int32{ids[:cut], ids[cut:]} {
		l, err := m.Forward(context.Background(), part, s.Caches, true)
		if err != nil {
			t.Fatal(err)
		}
		r.Logits = append(r.Logits, l...)
		logits = l[len(l)-m.Config.VocabSize:]
	}
	for range steps {
		id := int32(argmax(logits))
		r.Tokens = append(r.Tokens, id)
		l, err := m.Forward(context.Background(), []int32{id}, s.Caches, false)
		if err != nil {
			t.Fatal(err)
		}
		r.Logits = append(r.Logits, l...)
		logits = l
	}
	return r
}

// imageBatchRun runs batched passes of three sequences (two with images in other
// orders, one of text only) for steps greedy steps after their prompts.
func imageBatchRun(t *testing.T, m *model.Model, one *model.Model, a, b vision.Image, steps int) pipeRun {
	t.Helper()
	ids1, md1 := modeltest.TwoImagePrompt(t, one, a, b)
	ids2, md2 := modeltest.TwoImagePrompt(t, one, b, a)
	seqs := []model.Sequence{
		imageSeq(t, m, ids1, md1),
		imageSeq(t, m, modeltest.Tokens(31, 11), nil),
		imageSeq(t, m, ids2, md2),
	}
	var r pipeRun
	for range steps + 1 {
		res := m.ForwardBatch(context.Background(), seqs)
		for i := range seqs {
			if res[i].Err != nil {
				t.Fatal(res[i].Err)
			}
			r.Logits = append(r.Logits, res[i].Logits...)
			id := int32(argmax(res[i].Logits))
			r.Tokens = append(r.Tokens, id)
			seqs[i].Tokens = []int32{id}
		}
	}
	return r
}

// TestPipelineImagesCPU: a tiny Qwen3.5 (M-RoPE on rank 1's full-attention layer), a
// tiny Gemma 3 (an image's rows attend to each other on every layer) and a tiny Gemma 4
// of the E2B kind (per-layer inputs carried to rank 1) with a tower,
// split over two CPU ranks, read two images as one process does: rank 0's stage loads
// the tower and encodes the images to one process's features, and a prompt with them, in chunks and then decoded, alone and in a batched
// pass beside a text-only sequence, gives logits bit-identical to one process's.
func TestPipelineImagesCPU(t *testing.T) {
	for _, a := range []struct {
		name string
		dir  func(*testing.T) string
	}{{"qwen3_5", qwen35Vision}, {"gemma3", gemma3Vision}, {"gemma4", gemma4Vision}} {
		t.Run(a.name, func(t *testing.T) { testImagesOn(t, a.dir(t)) })
	}
}

// testImagesOn is TestPipelineImagesCPU's check of the checkpoint in dir.
func testImagesOn(t *testing.T, dir string) {
	{
		{
			one := modeltest.LoadVision(t, dir, cpu.New(2))
			p := pipelinetest.Start(t, pipelinetest.Config{
				Ranks:   2,
				Backend: func(int) compute.Backend { return cpu.New(2) },
			})
			m, err := p.Leader.Load(dir, p.Backends[0])
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if m.Vision() == nil {
				t.Fatal("rank 0's stage has no vision tower")
			}
			imA, imB := modeltest.Image(64, 48, 1), modeltest.Image(48, 64, 2)
			ids, md := modeltest.TwoImagePrompt(t, one, imA, imB)
			spans, err := m.EncodeImages(context.Background(), []vision.Image{imA, imB})
			if err != nil {
				t.Fatal(err)
			}
			for k, s := range spans {
				if s.Grid != md.Spans[k].Grid || bitDiffs(s.Rows, md.Spans[k].Rows) != 0 {
					t.Fatalf("rank 0's tower gave image %d grid %v and %d values unlike one process's %v", k, s.Grid, bitDiffs(s.Rows, md.Spans[k].Rows), md.Spans[k].Grid)
				}
			}
			want := imageRun(t, one, ids, md, 4)
			got := imageRun(t, m, ids, md, 4)
			if d := bitDiffs(got.Logits, want.Logits); d != 0 || !slices.Equal(got.Tokens, want.Tokens) {
				t.Errorf("two ranks: %d of %d logits differ from one process's, tokens %v for %v", d, len(want.Logits), got.Tokens, want.Tokens)
			}
			wantB := imageBatchRun(t, one, one, imA, imB, 3)
			gotB := imageBatchRun(t, m, one, imA, imB, 3)
			if d := bitDiffs(gotB.Logits, wantB.Logits); d != 0 || !slices.Equal(gotB.Tokens, wantB.Tokens) {
				t.Errorf("batched over two ranks: %d of %d logits differ from one process's, tokens %v for %v", d, len(wantB.Logits), gotB.Tokens, wantB.Tokens)
			}
			// The images must change the answer, or a rank that ignored them could pass.
			textOnly := slices.Clone(ids)
			for i := range textOnly {
				if textOnly[i] >= model.MediaBase {
					textOnly[i] = 3
				}
			}
			plain := imageSeq(t, one, textOnly, nil)
			l, err := one.Forward(context.Background(), textOnly, plain.Caches, false)
			if err != nil {
				t.Fatal(err)
			}
			if bitDiffs(l, want.Logits[len(ids)*one.Config.VocabSize-one.Config.VocabSize:len(ids)*one.Config.VocabSize]) == 0 {
				t.Error("the images did not change the prompt's logits")
			}
			// Rank 1 ran its half of the layers (rank 0's tally also counts the tower's).
			n := one.Config.NumLayers
			if w := p.Backends[1].Work(); w.Passes == 0 || len(w.Layers) != n-n/2 {
				t.Errorf("rank 1 ran %d passes over layers %v", w.Passes, w.Layers)
			}
		}
	}
}

// qwen35Chat writes qwen35Vision's model with Qwen's vocabulary and tokenizer and a
// chat template that places images, for the engine.
func qwen35Chat(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	hf, out := filepath.Join(tmp, "hf"), filepath.Join(tmp, "mlx")
	c := randmodel.TinyQwen3Next(151936)
	c.TieWordEmbeddings = true
	v := randmodel.TinyQwenVision()
	if err := randmodel.GenerateQwen35(hf, c, &v, randmodel.Options{Seed: 3, TokenizerDir: testdata.Tokenizer(t, "qwen3")}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(hf, "tokenizer_config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tc map[string]any
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	tc["chat_template"] = randmodel.QwenVisionTemplate
	raw, _ = json.Marshal(tc)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPipelineEngineImagesCPU: the engine on a Qwen3.5 with a tower split over two CPU
// ranks, each with its own prefix cache, in prefill chunks of 16 rows (which cut through
// the image), gives one process's greedy tokens for one image, for the conversation going
// on with it (which restores the image's blocks on both ranks and encodes nothing again),
// for two images, and for a text-only request.
func TestPipelineEngineImagesCPU(t *testing.T) {
	dir := qwen35Chat(t)
	ref, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: runnertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	prefix := make([]*kvstore.PrefixCache, 2)
	for r := range prefix {
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Log: runnertest.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		prefix[r] = pc
	}
	p := pipelinetest.Start(t, pipelinetest.Config{
		Ranks:   2,
		Backend: func(int) compute.Backend { return cpu.New(2) },
		Prefix:  func(r int) *kvstore.PrefixCache { return prefix[r] },
	})
	e, err := runner.Load(dir, runner.LoadOptions{Backend: p.Backends[0], Prefix: prefix[0], Pipeline: p.Leader, Logger: runnertest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 6
	o.NumBatch = 16
	o.NumDraft = 0
	gen := func(e *runner.Engine, msgs []template.Message, images ...vision.Image) *runner.Result {
		t.Helper()
		res, err := e.Generate(context.Background(), runner.Request{Messages: msgs, Options: o, Images: images}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	imA, imB := modeltest.Image(64, 48, 1), modeltest.Image(48, 64, 2)
	check := func(name string, msgs []template.Message, images ...vision.Image) *runner.Result {
		t.Helper()
		got, want := gen(e, msgs, images...), gen(ref, msgs, images...)
		if !slices.Equal(got.Tokens, want.Tokens) || got.Images != len(images) {
			t.Errorf("%s: two ranks gave %v (%d images), one process %v", name, got.Tokens, got.Images, want.Tokens)
		}
		return got
	}
	turn1 := []template.Message{runnertest.User(runnertest.Img, runnertest.Txt("What is in this picture?"))}
	first := check("one image", turn1, imA)
	if first.ImageTokens == 0 || first.ImagesEncoded != 1 {
		t.Fatalf("one image: %d image tokens, %d encoded", first.ImageTokens, first.ImagesEncoded)
	}
	turn2 := append(slices.Clone(turn1), template.Message{"role": "assistant", "content": ref.Tokenizer.Decode(first.Tokens, true)},
		runnertest.User(runnertest.Txt("And the colours?")))
	before := p.Net.Traffic(0, 1).FloatValues
	again := check("the same image again", turn2, imA)
	if again.Prefix == nil || again.Prefix.Cached < first.PromptTokens-1 || again.ImagesEncoded != 0 {
		t.Errorf("the conversation going on: prefix %+v, %d images encoded; want the first turn's %d tokens restored, nothing encoded", again.Prefix, again.ImagesEncoded, first.PromptTokens)
	}
	if sent := (p.Net.Traffic(0, 1).FloatValues - before) / e.Model.Config.HiddenSize; sent >= again.PromptTokens-first.PromptTokens+again.PromptTokens/2 {
		t.Errorf("rank 1 was handed %d positions for a prompt of %d of which %d were cached", sent, again.PromptTokens, again.Prefix.Cached)
	}
	check("two images", []template.Message{runnertest.User(runnertest.Txt("Compare"), runnertest.Img, runnertest.Txt("with"), runnertest.Img)}, imA, imB)
	check("no image", []template.Message{runnertest.User(runnertest.Txt("Hello"))})
}
