package runnertest

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

	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/vision"
)

// Image1024x768 measures, on the CPU backend with 2 threads and the checkpoint in dir (a
// family's benchmark describes its model and tower), what one 1024×768 image costs a
// request: decoding its PNG, encoding it
// (preprocessing and the tower: runner.Result.EncodeDuration) and the prefill its rows add,
// against two prompts measured in the same iteration: the same text without the image, and
// a text prompt as long as the prompt with the image (the image's rows and the frame
// tokens its placeholder adds beside them replaced by words). Each iteration's image
// differs by its seed, so that the feature cache never serves it; the first iteration is a
// warm-up. It reports the medians over the iterations, and prints them as a table where
// b.N > 1 (run with -benchtime=Nx).
func Image1024x768(b *testing.B, dir string, frame int) {
	b.Helper()
	e, err := runner.Load(dir, runner.LoadOptions{Threads: 2, Logger: Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	o := runner.Greedy()
	o.NumPredict = 1
	question := "What is in this picture?"
	user := func(parts ...any) []template.Message { return []template.Message{User(parts...)} }
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
		im := gen(user(Img, Txt(question)), vision.NewImage(rgb))
		if im.ImagesEncoded != 1 {
			b.Fatalf("iteration %d: %d images encoded", i, im.ImagesEncoded)
		}
		if sameLen == nil { // a text as long as the prompt with the image
			sameLen = user(Txt(question + strings.Repeat(" picture", im.ImageTokens+frame)))
		}
		plain := gen(user(Txt(question)))
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
