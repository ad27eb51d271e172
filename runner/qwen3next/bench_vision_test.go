package qwen3next_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// BenchmarkImage1024x768 measures, on the CPU backend with the tiny random Qwen3.5 and a tiny tower
// (registry/randmodel's TinyQwenVision: 2 blocks, 32 wide) of Qwen3.5's patch geometry (16-pixel
// patches, 2×2 merge, a 48×48 position grid, its default pixel budget, under which 1024×768 keeps its
// size: 3,072 patches, 768 tokens), what one 1024×768 image costs a request: decoding its PNG, encoding it (preprocessing and the tower:
// runner.Result.EncodeDuration) and the prefill its rows add, against two prompts measured in the same
// iteration: the same text without the image, and a text prompt as long as the prompt with the image.
// Each iteration's image differs by its seed, so that the feature cache never serves it. It reports the
// medians over the iterations; run with -benchtime=Nx:
//
//	go test ./runner/qwen3next -run '^$' -bench Image1024x768 -benchtime 9x
func BenchmarkImage1024x768(b *testing.B) {
	v := randmodel.TinyQwenVision()
	v.Patch, v.NumPositions, v.MinPixels, v.MaxPixels = 16, 2304, 65536, 16777216
	e, err := runner.Load(visionCheckpointWith(b, v), runner.LoadOptions{Threads: 2, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 1
	question := "What is in this picture?"
	user := func(parts ...any) []template.Message { return []template.Message{{"role": "user", "content": parts}} }
	txt := func(s string) map[string]any { return map[string]any{"type": "text", "text": s} }
	gen := func(msgs []template.Message, images ...vision.Image) *runner.Result {
		res, err := e.Generate(context.Background(), runner.Request{Messages: msgs, Options: o, Images: images}, nil)
		if err != nil {
			b.Fatal(err)
		}
		return res
	}
	pngOf := func(seed uint8) []byte {
		m := image.NewNRGBA(image.Rect(0, 0, 1024, 768))
		for y := range 768 {
			for x := range 1024 {
				m.Set(x, y, color.NRGBA{uint8(x/4) + seed, uint8(y/3) ^ seed, uint8(x*y/97) + seed, 255})
			}
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, m); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	// A text as long as the prompt with the image: the image's rows replaced by words.
	var sameLen []template.Message
	var decode, encode, withImage, textOnly, sameText, added []float64
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	var imageTokens, promptTokens, sameTokens int
	for i := range b.N + 1 { // the first is a warm-up
		data := pngOf(uint8(i))
		start := time.Now()
		rgb, err := vision.Decode(data, vision.DefaultLimits)
		dec := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		im := gen(user(map[string]any{"type": "image"}, txt(question)), vision.NewImage(rgb))
		if im.ImagesEncoded != 1 {
			b.Fatalf("iteration %d: %d images encoded", i, im.ImagesEncoded)
		}
		if sameLen == nil {
			words := strings.Repeat(" picture", im.ImageTokens)
			sameLen = user(txt(question + words))
		}
		plain := gen(user(txt(question)))
		same := gen(sameLen)
		if i == 0 {
			continue
		}
		imageTokens, promptTokens, sameTokens = im.ImageTokens, im.PromptTokens, same.PromptTokens
		prefill := im.PromptDuration - im.EncodeDuration
		decode = append(decode, ms(dec))
		encode = append(encode, ms(im.EncodeDuration))
		withImage = append(withImage, ms(prefill))
		textOnly = append(textOnly, ms(plain.PromptDuration))
		sameText = append(sameText, ms(same.PromptDuration))
		added = append(added, ms(prefill-plain.PromptDuration))
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		if len(s)%2 == 1 {
			return s[len(s)/2]
		}
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	b.ReportMetric(med(decode), "decode-ms")
	b.ReportMetric(med(encode), "encode-ms")
	b.ReportMetric(med(added), "added-prefill-ms")
	b.ReportMetric(med(withImage)/med(sameText), "prefill-vs-same-length-text")
	b.ReportMetric(0, "ns/op")
	var t strings.Builder
	fmt.Fprintf(&t, "medians of %d iterations (CPU backend, 2 threads); the image is %d of the prompt's %d tokens\n", len(encode), imageTokens, promptTokens)
	fmt.Fprintf(&t, "| PNG decode, 1024×768 | %.1f ms |\n", med(decode))
	fmt.Fprintf(&t, "| encode (preprocess + tower) | %.1f ms |\n", med(encode))
	fmt.Fprintf(&t, "| prefill with the image (encode excluded) | %.1f ms |\n", med(withImage))
	fmt.Fprintf(&t, "| prefill of the text alone | %.1f ms |\n", med(textOnly))
	fmt.Fprintf(&t, "| prefill the image adds | %.1f ms |\n", med(added))
	fmt.Fprintf(&t, "| prefill of a text prompt of %d tokens | %.1f ms (image prompt / text prompt %.2f×) |\n", sameTokens, med(sameText), med(withImage)/med(sameText))
	if b.N > 1 { // the table of the run that counts (go test truncates a benchmark's log)
		fmt.Print(t.String())
	}
}
