package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/template"
)

const runHelp = `Run a model on a prompt and stream the answer to stdout (one shot; the
interactive prompt comes with the server). MODEL is a name in the store (see mlxg list)
or a checkpoint directory. The prompt is the remaining arguments, or stdin when none.

The prompt is sent as a user message through the model's chat template (--raw sends it as
it is). Generation options take Ollama's names, e.g.
  -o num_predict=64 -o temperature=0 -o seed=1 -o stop="\n\n" -o num_ctx=8192`

func newRunCmd() *cobra.Command {
	var (
		verbose, raw bool
		think        string
		system       string
		threads      int
		options      []string
	)
	cmd := &cobra.Command{
		Use:   "run MODEL [PROMPT]",
		Short: "Run a model",
		Long:  runHelp,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := parseRunOptions(options)
			if err != nil {
				return err
			}
			prompt := strings.Join(args[1:], " ")
			if len(args) == 1 {
				in, ok := cmd.InOrStdin().(*os.File)
				if ok && isatty.IsTerminal(in.Fd()) {
					return fmt.Errorf("give a prompt: mlxg run %s \"PROMPT\" (or pipe one on stdin)", args[0])
				}
				b, err := io.ReadAll(cmd.InOrStdin())
				if err != nil {
					return err
				}
				prompt = strings.TrimSpace(string(b))
			}
			if prompt == "" {
				return fmt.Errorf("the prompt is empty")
			}
			dir, err := modelDir(args[0])
			if err != nil {
				return err
			}

			// Warnings (truncation, a context clamped to the model) go to stderr; load
			// details only with --verbose.
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			choice, err := backend.Select(backend.Options{Threads: threads, Logger: log})
			if err != nil {
				return err
			}
			start := time.Now()
			e, err := runner.Load(dir, runner.LoadOptions{Backend: choice.Backend, Logger: log})
			if err != nil {
				return err
			}
			defer e.Close()
			load := time.Since(start)

			req := runner.Request{Options: opts}
			switch {
			case raw:
				req.Prompt = prompt
			case e.Template == nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "%s has no chat template: sending the prompt as it is\n", dir)
				req.Prompt = prompt
			default:
				if system != "" {
					req.Messages = append(req.Messages, template.Message{"role": "system", "content": system})
				}
				req.Messages = append(req.Messages, template.Message{"role": "user", "content": prompt})
				switch think {
				case "":
				case "true", "false":
					req.TemplateKwargs = map[string]any{"enable_thinking": think == "true"}
				default:
					return fmt.Errorf("--think is %q: use true or false", think)
				}
			}
			out := cmd.OutOrStdout()
			res, err := e.Generate(cmd.Context(), req, func(s string) error {
				_, err := io.WriteString(out, s)
				return err
			})
			if res != nil && !strings.HasSuffix(res.Text, "\n") {
				fmt.Fprintln(out)
			}
			if err != nil {
				return err
			}
			if verbose {
				printStats(cmd.ErrOrStderr(), res, load, time.Since(start))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&verbose, "verbose", false, "show load details and timings")
	f.BoolVar(&raw, "raw", false, "send the prompt without the chat template")
	f.StringVar(&think, "think", "", "true or false: enable_thinking for templates that read it (Qwen3)")
	f.StringVar(&system, "system", "", "a system message")
	f.IntVar(&threads, "threads", 0, "CPU threads (0: all cores)")
	f.StringArrayVarP(&options, "option", "o", nil, "a generation option NAME=VALUE (Ollama's names; repeatable)")
	return cmd
}

// parseRunOptions applies NAME=VALUE pairs to Ollama's defaults. A value is read as JSON
// when it parses (numbers, true, lists) and as a string otherwise; stop may repeat.
func parseRunOptions(pairs []string) (runner.Options, error) {
	o := runner.DefaultOptions()
	m := map[string]any{}
	var stops []string
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return o, fmt.Errorf("option %q: use NAME=VALUE, e.g. -o temperature=0", p)
		}
		if k == "stop" {
			var s string
			if json.Unmarshal([]byte(v), &s) != nil {
				s = v
			}
			stops = append(stops, s)
			continue
		}
		var val any
		if json.Unmarshal([]byte(v), &val) != nil {
			val = v
		}
		m[k] = val
	}
	if stops != nil {
		m["stop"] = stops
	}
	b, _ := json.Marshal(m)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return o, fmt.Errorf("options: %v (known: %s)", err, strings.Join(optionNames(), ", "))
	}
	return o, o.Validate()
}

func optionNames() []string {
	b, _ := json.Marshal(runner.DefaultOptions())
	var m map[string]any
	json.Unmarshal(b, &m)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// printStats prints timings as ollama run --verbose does.
func printStats(w io.Writer, r *runner.Result, load, total time.Duration) {
	fmt.Fprintf(w, "total duration:       %v\n", total)
	fmt.Fprintf(w, "load duration:        %v\n", load)
	fmt.Fprintf(w, "prompt eval count:    %d token(s)\n", r.PromptTokens)
	fmt.Fprintf(w, "prompt eval duration: %v\n", r.PromptDuration)
	fmt.Fprintf(w, "prompt eval rate:     %.2f tokens/s\n", r.PromptRate())
	fmt.Fprintf(w, "eval count:           %d token(s)\n", r.EvalCount)
	fmt.Fprintf(w, "eval duration:        %v\n", r.EvalDuration)
	fmt.Fprintf(w, "eval rate:            %.2f tokens/s\n", r.EvalRate())
}
