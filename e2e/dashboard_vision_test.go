package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
)

// TestDashboardChatImages drives the chat page in headless Chromium with the vision model: an image picked
// with the file picker and one dropped on the conversation (a real drag of a file, through the DevTools
// protocol) show as thumbnails, go with their messages, and reach the tower (the server's PERF lines); the
// second turn sends the conversation's two images, the first's features kept from the first turn. A
// text-only model's page offers no picker and says why.
func TestDashboardChatImages(t *testing.T) {
	agentsPass(t)
	vis := visionModels[0]
	s := startVision(t, vis)
	b := newBrowser(t)
	name := vis.name + ":latest"
	dir := t.TempDir()
	picked := writePNG(t, dir, "picked.png", 72, 56, 7)   // 9×7 = 63 tokens
	dropped := writePNG(t, dir, "dropped.png", 88, 40, 8) // 11×5 = 55 tokens

	b.run(t, "open chat", 30*time.Second,
		chromedp.Navigate(s.base+"/dashboard/chat"),
		poll(fmt.Sprintf(`[...document.querySelectorAll('#model option')].some((o) => o.value === %q)`, name)),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => { const s = document.querySelector('#model');
			s.value = [...s.options].find((o) => o.value.startsWith(%q)).value; s.dispatchEvent(new Event('change')); })()`, model+":")),
		poll(`document.querySelector('#image').disabled && !document.querySelector('#imagenote').hidden`))
	from := s.logSize(t)
	if n := evalJS[string](t, b, `document.querySelector('#imagenote').textContent`); !strings.Contains(n, "reads text only") {
		t.Errorf("a text-only model's note: %q", n)
	}

	b.run(t, "pick an image", 60*time.Second,
		chromedp.SetValue(chromedp.CSS("#model"), name),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#model').dispatchEvent(new Event('change'))`),
		poll(`!document.querySelector('#image').disabled && document.querySelector('#imagenote').hidden`),
		chromedp.SetValue(chromedp.CSS("#num_predict"), "8"),
		chromedp.SetValue(chromedp.CSS("#seed"), "3"),
		chromedp.SetUploadFiles(chromedp.CSS("#image"), []string{picked}),
		poll(`document.querySelectorAll('#attachments img.thumb').length === 1`),
		chromedp.SetValue(chromedp.CSS("#prompt"), "What is in this picture?"),
		chromedp.Click(chromedp.CSS("#go")),
		poll(`document.querySelectorAll('.msg.assistant[data-done]').length === 1`))
	b.shot(t, "picked")
	first := evalJS[map[string]any](t, b, `(() => { const u = document.querySelector('.msg.user'), a = document.querySelector('.msg.assistant');
		return {thumbs: u.querySelectorAll('img.thumb').length, src: u.querySelector('img.thumb').src.slice(0, 22), text: u.textContent,
			content: a.querySelector('.content').textContent, perf: a.querySelector('.perf').textContent, pending: document.querySelectorAll('#attachments img').length}; })()`)
	if first["thumbs"] != 1.0 || first["src"] != "data:image/png;base64," || first["text"] != "What is in this picture?" || first["pending"] != 0.0 ||
		!strings.HasPrefix(first["perf"].(string), "PERF: model="+name) || first["content"] == "" {
		t.Fatalf("first turn: %+v", first)
	}
	t.Log(s.perfImages(t, vis.name, from, 63)[0])

	// A real drag of a file from outside the page onto the conversation.
	rect := evalJS[[]float64](t, b, `(() => { const r = document.querySelector('#log').getBoundingClientRect(); return [r.left + r.width / 2, r.top + Math.min(r.height, 200) / 2]; })()`)
	drag := func(kind input.DispatchDragEventType) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.DispatchDragEvent, input.DispatchDragEventParams{Type: kind, X: rect[0], Y: rect[1],
				Data: &input.DragData{Items: []*input.DragDataItem{}, Files: []string{dropped}, DragOperationsMask: 1}})
			return err
		})
	}
	b.run(t, "drop an image", 60*time.Second,
		drag(input.DispatchDragEventTypeDragEnter),
		drag(input.DispatchDragEventTypeDragOver),
		drag(input.DispatchDragEventTypeDrop),
		poll(`document.querySelectorAll('#attachments img.thumb').length === 1 && document.querySelector('#attachments img').alt === 'dropped.png'`),
		chromedp.SetValue(chromedp.CSS("#prompt"), "And this one?"),
		chromedp.Click(chromedp.CSS("#go")),
		poll(`document.querySelectorAll('.msg.assistant[data-done]').length === 2`))
	b.shot(t, "dropped")
	second := evalJS[map[string]any](t, b, `(() => { const u = document.querySelectorAll('.msg.user')[1], a = document.querySelectorAll('.msg.assistant')[1];
		return {thumbs: u.querySelectorAll('img.thumb').length, alt: u.querySelector('img.thumb').alt, perf: a.querySelector('.perf').textContent}; })()`)
	if second["thumbs"] != 1.0 || second["alt"] != "dropped.png" || !strings.HasPrefix(second["perf"].(string), "PERF: model="+name) {
		t.Fatalf("second turn: %+v", second)
	}
	// Both turns' images: the first's 63 rows from the feature cache, the dropped one's 55 encoded.
	re := fmt.Sprintf(`images=2 image_tokens=%d images_encoded=1 `, 63+55)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logTail(), re) {
		if time.Now().After(deadline) {
			t.Fatalf("no PERF line with %q\n%s", re, s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.noErrors(t)
}
