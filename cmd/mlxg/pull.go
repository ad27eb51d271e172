package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
)

func newPullCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pull MODEL",
		Short: "Pull a model from a registry",
		Long: `Pull an MLX checkpoint from the Hugging Face Hub into the Hugging Face cache.

MODEL is org/name[:revision], hf.co/org/name, huggingface.co/org/name, or a built-in alias
such as qwen3:0.6b. HF_ENDPOINT names another Hub, HF_TOKEN authenticates (gated or private
repos), HF_HUB_CACHE or HF_HOME choose the cache. An interrupted pull resumes where it stopped.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := newPullRenderer(cmd.ErrOrStderr(), args[0])
			err := withModels(cmd.Context(), func(m modelService) error {
				return m.Pull(cmd.Context(), &api.PullRequest{Model: args[0]}, r.event)
			})
			r.close(err == nil)
			return err
		},
	}
}

// pullRenderer draws pull events: status lines, and on a terminal one bar for the bytes of all files
// (bytes, speed and ETA), since files download several at once; elsewhere (logs, pipes) one line per file.
type pullRenderer struct {
	w       io.Writer
	tty     bool
	model   string
	bar     *progressbar.ProgressBar
	files   map[string]int64 // digest -> total
	done    map[string]int64 // digest -> completed
	names   map[string]bool  // files reported complete (without a terminal)
	base    int64            // bytes already on disk when the pull began
	total   int64
	start   time.Time
	lastMsg string
	waiting bool // a rate-limit countdown is showing
}

func newPullRenderer(w io.Writer, model string) *pullRenderer {
	f, ok := w.(*os.File)
	return &pullRenderer{w: w, tty: ok && term.IsTerminal(int(f.Fd())), model: model,
		files: map[string]int64{}, done: map[string]int64{}, names: map[string]bool{}, start: time.Now()}
}

func (r *pullRenderer) sum() int64 {
	var sum int64
	for _, c := range r.done {
		sum += c
	}
	return sum
}

func (r *pullRenderer) event(p api.ProgressResponse) error {
	if strings.HasPrefix(p.Status, registry.RateLimitedStatus) {
		r.countdown(p.Status)
		return nil
	}
	if r.waiting {
		r.waiting = false
		if r.tty && r.bar != nil {
			r.bar.Describe("pulling " + r.model)
		} else if r.tty {
			fmt.Fprint(r.w, "\r\033[K")
		}
	}
	if p.Digest == "" {
		if r.bar != nil && r.sum() == r.total {
			r.bar.Finish()
			fmt.Fprintln(r.w)
			r.bar = nil
		} else if r.bar != nil {
			r.bar.Clear() // a line in the middle of the pull; the bar redraws below it
		}
		if strings.HasPrefix(p.Status, "warning:") {
			fmt.Fprintln(r.w, "Warning:"+strings.TrimPrefix(p.Status, "warning:"))
		} else if p.Status != r.lastMsg {
			fmt.Fprintln(r.w, p.Status)
		}
		r.lastMsg = p.Status
		return nil
	}
	if _, ok := r.files[p.Digest]; !ok {
		r.files[p.Digest] = p.Total
		r.total += p.Total
		r.base += p.Completed
		if r.bar != nil {
			r.bar.ChangeMax64(r.total)
		}
	}
	r.done[p.Digest] = p.Completed
	if !r.tty {
		if p.Completed == p.Total && !r.names[p.Digest] {
			r.names[p.Digest] = true
			fmt.Fprintf(r.w, "%s: %s\n", p.Status, humanize.Bytes(uint64(p.Total)))
		}
		return nil
	}
	if r.bar == nil {
		r.bar = progressbar.NewOptions64(r.total,
			progressbar.OptionSetWriter(r.w),
			progressbar.OptionSetDescription("pulling "+r.model),
			progressbar.OptionShowBytes(true),
			progressbar.OptionShowCount(),
			progressbar.OptionShowTotalBytes(true),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetRenderBlankState(true),
		)
	}
	return r.bar.Set64(r.sum())
}

// countdown shows a rate-limit wait, which comes once a second: on a terminal in place (in the bar's
// description once there is a bar), elsewhere as one line when it starts.
func (r *pullRenderer) countdown(status string) {
	switch {
	case r.tty && r.bar != nil:
		r.bar.Describe(status)
	case r.tty:
		fmt.Fprint(r.w, "\r\033[K"+status)
	case !r.waiting:
		fmt.Fprintln(r.w, status)
	}
	r.waiting = true
}

// close ends the bar and, after a success, sums the pull up with humanized sizes.
func (r *pullRenderer) close(ok bool) {
	if r.bar != nil {
		r.bar.Exit()
		fmt.Fprintln(r.w)
	}
	if ok && r.total > 0 {
		took := time.Since(r.start)
		got := r.total - r.base
		if got == 0 {
			fmt.Fprintf(r.w, "%s: %s in %d files, already up to date\n", r.model, humanize.Bytes(uint64(r.total)), len(r.files))
			return
		}
		fmt.Fprintf(r.w, "%s: %s in %d files; downloaded %s in %s (%s/s)\n", r.model, humanize.Bytes(uint64(r.total)), len(r.files),
			humanize.Bytes(uint64(got)), took.Round(time.Millisecond), humanize.Bytes(uint64(float64(got)/max(took.Seconds(), 1e-3))))
	}
}
