package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/backend"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/parser"
	"github.com/mlxg/mlxg/text/template"
)

const runHelp = `Run a model: chat with it in the terminal, or answer one prompt.

With a PROMPT (or text on stdin) mlxg answers it and exits; otherwise it starts an interactive session
(/? lists its commands; """ starts and ends a multi-line message; Ctrl-C stops an answer; Ctrl-D or /bye
exits). Like every command it talks to the server at MLXG_HOST/OLLAMA_HOST, starting ` + "`mlxg serve`" + ` in
the background when none answers, and pulls the model first when it is not on this machine.

MODEL may also be a checkpoint directory, which runs one prompt in this process without a server, with
the KV cache the server's policy would choose (the --kv-* flags and MLXG_KV_* variables as for serve).
Generation options take Ollama's names, e.g.
  -o num_predict=64 -o temperature=0 -o seed=1 -o stop="\n\n" -o num_ctx=8192`

func newRunCmd() *cobra.Command {
	var (
		verbose, raw, hideThinking bool
		think, system, keepAlive   string
		format                     string
		threads                    int
		options                    []string
		kv                         kvstore.Options
		numDraft                   int
		draftModel                 string
	)
	cmd := &cobra.Command{
		Use:   "run MODEL [PROMPT]",
		Short: "Run a model",
		Long:  runHelp,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			model := args[0]
			prompt := strings.Join(args[1:], " ")
			in := cmd.InOrStdin()
			interactive := len(args) == 1 && isTerminal(in)
			if !interactive && !isTerminal(in) {
				b, err := io.ReadAll(in)
				if err != nil {
					return err
				}
				if s := strings.TrimSpace(string(b)); s != "" {
					prompt = strings.TrimSpace(prompt + "\n\n" + s)
				}
			}
			if raw && interactive {
				return fmt.Errorf("--raw sends one prompt: give it (mlxg run %s --raw \"PROMPT\")", model)
			}
			if !interactive && prompt == "" {
				return fmt.Errorf("the prompt is empty: give one (mlxg run %s \"PROMPT\"), pipe one on stdin, or run on a terminal for a chat", model)
			}
			fmtJSON, err := formatArg(format)
			if err != nil {
				return err
			}
			if numDraftGiven(cmd.Flags()) {
				if err := checkNumDraft("--num-draft", numDraft); err != nil {
					return err
				}
				options = append(options, "num_draft="+strconv.Itoa(numDraft))
			}
			st, err := os.Stat(model)
			dirModel := err == nil && st.IsDir()
			if draftModel != "" && !dirModel {
				return fmt.Errorf("--draft-model is for MODEL a directory run in this process; a served model gets its draft model from its Modelfile (PARAMETER draft_model) or mlxg serve --draft-model")
			}
			if dirModel {
				if interactive {
					return fmt.Errorf("%s is a directory: a chat needs the server; import it with mlxg create NAME --from %s, or give a prompt", model, model)
				}
				if err := kv.ApplyEnv(os.Getenv); err != nil {
					return err
				}
				return runDirectory(cmd, model, draftModel, prompt, options, raw, think, system, threads, verbose, kv, fmtJSON)
			}

			s := &chatSession{model: model, options: map[string]any{}, system: system, hideThinking: hideThinking,
				verbose: verbose, format: fmtJSON, out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr()}
			for _, o := range options {
				name, value, ok := strings.Cut(o, "=")
				if !ok || name == "" {
					return fmt.Errorf("option %q: use NAME=VALUE, e.g. -o temperature=0", o)
				}
				if err := setOption(s.options, name, value); err != nil {
					return err
				}
			}
			switch think {
			case "":
			case "true", "false":
				s.think = &api.ThinkValue{Value: think == "true"}
			case "high", "medium", "low":
				s.think = &api.ThinkValue{Value: think}
			default:
				return fmt.Errorf("--think is %q: use true, false, high, medium or low", think)
			}
			if keepAlive != "" {
				var d api.Duration
				if err := d.UnmarshalJSON([]byte(`"` + keepAlive + `"`)); err != nil {
					if err := d.UnmarshalJSON([]byte(keepAlive)); err != nil {
						return fmt.Errorf("--keepalive %q: give a duration such as 10m or 1h, or -1 to keep the model loaded", keepAlive)
					}
				}
				s.keepAlive = &d
			}
			c, err := connect(ctx, s.errw)
			if err != nil {
				return err
			}
			s.c = c
			if s.show, err = ensureModel(ctx, c, model, s.errw); err != nil {
				return err
			}
			if raw {
				return runRawPrompt(ctx, s, prompt)
			}
			if !interactive {
				return s.send(ctx, prompt)
			}
			if err := s.load(ctx); err != nil {
				return err
			}
			// The session outlives the first Ctrl-C: that one stops an answer, not mlxg.
			ctx = context.WithoutCancel(ctx)
			f, _ := in.(*os.File)
			if f != nil && isTerminal(cmd.OutOrStdout()) {
				return s.repl(ctx, newTermLines(f, cmd.OutOrStdout()))
			}
			return s.repl(ctx, &plainLines{sc: bufio.NewScanner(in), out: cmd.OutOrStdout()})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&verbose, "verbose", false, "show timings after each answer")
	f.StringVar(&think, "think", "", "thinking models: true, false, or a level (high, medium, low); default: the model's")
	f.Lookup("think").NoOptDefVal = "true" // --think alone turns it on, as in ollama
	f.BoolVar(&hideThinking, "hidethinking", false, "do not show the model's thinking")
	f.StringVar(&keepAlive, "keepalive", "", "how long the model stays loaded after this session (e.g. 10m, 1h; -1: forever)")
	f.StringVar(&system, "system", "", "a system message")
	f.StringVar(&format, "format", "", "structured output: json (any object) or a JSON schema; the answer is constrained to it")
	f.BoolVar(&raw, "raw", false, "send the prompt without the chat template")
	f.IntVar(&threads, "threads", 0, "CPU threads when MODEL is a directory run in-process (0: all cores)")
	f.StringArrayVarP(&options, "option", "o", nil, "a generation option NAME=VALUE (Ollama's names; repeatable)")
	registerDraftFlags(f, &numDraft, "this session's num_draft")
	f.StringVar(&draftModel, "draft-model", "", "MODEL a directory: a draft model's directory (same tokenizer) for speculative decoding")
	// The server's KV settings, for a directory run in this process (a server has its own).
	kvFlags := pflag.NewFlagSet("kv", pflag.ContinueOnError)
	registerKVFlags(kvFlags, &kv)
	kvFlags.VisitAll(func(fl *pflag.Flag) { fl.Usage = "MODEL a directory: " + fl.Usage })
	f.AddFlagSet(kvFlags)
	return cmd
}

// runRawPrompt sends a prompt through /api/generate without the template.
func runRawPrompt(ctx context.Context, s *chatSession, prompt string) error {
	var text string
	var final api.GenerateResponse
	err := s.c.Generate(ctx, &api.GenerateRequest{Model: s.model, Prompt: prompt, Raw: true, Options: s.options, KeepAlive: s.keepAlive,
		Format: s.format},
		func(r api.GenerateResponse) error {
			text += r.Response
			if r.Done {
				final = r
			}
			_, err := io.WriteString(s.out, r.Response)
			return err
		})
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(s.out)
	}
	if err == nil && s.verbose {
		printMetrics(s.errw, final.Metrics)
	}
	return err
}

// runDirectory answers one prompt with a checkpoint directory, in this process.
func runDirectory(cmd *cobra.Command, dir, draftDir, prompt string, options []string, raw bool, think, system string, threads int, verbose bool, kv kvstore.Options, format json.RawMessage) error {
	opts, err := parseRunOptions(options)
	if err != nil {
		return err
	}
	schema, err := constrain.FromFormat(format)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	choice, err := backend.Select(backend.Options{Threads: threads, Logger: log})
	if err != nil {
		return err
	}
	// The KV cache as serve would choose it: the policy's plan from the memory it reads
	// and the user's KV settings, which settles the context and the backend's limits and
	// makes the sequence's caches.
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fmt.Errorf("%s is not a checkpoint directory: %w", dir, err)
	}
	shape, err := kvstore.ShapeFromConfig(config, weightBytes(dir))
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	budget, streamPolicy, err := weightStreaming()
	if err != nil {
		return err
	}
	if budget > 0 {
		// Streaming mode: the weights take the budget, not their size.
		shape.WeightBytes = min(shape.WeightBytes, budget)
	}
	policy := &kvstore.Policy{Options: kv, Log: log}
	askCtx := opts.NumCtx
	if !hasOption(options, "num_ctx") {
		askCtx = 0 // sized from memory, as serve does, unless MLXG_CONTEXT_LENGTH says
		if _, v := envFirst("MLXG_CONTEXT_LENGTH", "OLLAMA_CONTEXT_LENGTH"); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				askCtx = n
			}
		}
	}
	plan, err := policy.Plan(dir, shape, askCtx, false)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	if plan.Context > 0 && (askCtx == 0 || plan.Context < opts.NumCtx) {
		opts.NumCtx = plan.Context // at most the model's maximum and the largest context that fits
	}
	be, err := choice.ForModel()
	if err != nil {
		return err
	}
	if err := backend.ApplyPlan(be, plan); err != nil {
		_ = backend.Release(be)
		return err
	}
	start := time.Now()
	seqs := policy.Sequences(dir, shape, plan, nil)
	e, err := runner.Load(dir, runner.LoadOptions{Backend: be, Logger: log, Context: opts.NumCtx,
		WeightBudget: budget, StreamPolicy: streamPolicy,
		KVCache: func(_ *model.Model, n int) ([]kvstore.Layer, error) {
			caches, _, err := seqs.Caches(n)
			return caches, err
		}})
	if err != nil {
		_ = backend.Release(be)
		return err
	}
	var draft *runner.Engine
	defer func() {
		_ = backend.Release(be) // before the models: Metal's arrays wrap their mmaps
		e.Close()
		if draft != nil {
			draft.Close()
		}
	}()
	if draftDir != "" {
		if draft, err = loadDraftDir(policy, draftDir, be, log, opts.NumCtx); err != nil {
			return err
		}
		if err := e.SetDraft(draft); err != nil {
			return fmt.Errorf("--draft-model %s cannot draft for %s: %w", draftDir, dir, err)
		}
	}
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
		case "high", "medium", "low":
			// as the server does: thinking on, and the level for templates that read it
			req.TemplateKwargs = map[string]any{"enable_thinking": true, "reasoning_effort": think}
		default:
			return fmt.Errorf("--think is %q: use true, false, high, medium or low", think)
		}
	}
	if schema != nil {
		req.Format = &runner.Format{Schema: schema}
		if _, ok := e.Tokenizer.TokenID(parser.ThinkOpen); ok && len(req.Messages) > 0 && think != "false" {
			// The thinking block (printed as it comes here) stays free; the answer after it is constrained.
			req.Format.ThinkOpen, req.Format.ThinkClose = parser.ThinkOpen, parser.ThinkClose
			p, err := e.Template.Apply(req.Messages, template.Options{AddGenerationPrompt: true, Kwargs: req.TemplateKwargs})
			if err != nil {
				return err
			}
			req.Format.InThinking = parser.PromptOpensThinking(p)
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
}

// weightBytes adds the sizes of a checkpoint directory's safetensors files.
// loadDraftDir loads a draft model's directory on the target's backend, its caches from the
// KV policy for its own shape at numCtx.
func loadDraftDir(policy *kvstore.Policy, dir string, be compute.Backend, log *slog.Logger, numCtx int) (*runner.Engine, error) {
	config, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("--draft-model %s is not a checkpoint directory: %w", dir, err)
	}
	shape, err := kvstore.ShapeFromConfig(config, weightBytes(dir))
	if err != nil {
		return nil, fmt.Errorf("--draft-model %s: %w", dir, err)
	}
	plan, err := policy.Plan(dir, shape, numCtx, false)
	if err != nil {
		return nil, fmt.Errorf("--draft-model %s: %w", dir, err)
	}
	seqs := policy.Sequences(dir, shape, plan, nil)
	d, err := runner.Load(dir, runner.LoadOptions{Backend: be, Logger: log, Context: numCtx,
		KVCache: func(_ *model.Model, n int) ([]kvstore.Layer, error) {
			caches, _, err := seqs.Caches(n)
			return caches, err
		}})
	if err != nil {
		return nil, fmt.Errorf("--draft-model %s: %w", dir, err)
	}
	return d, nil
}

func weightBytes(dir string) int64 {
	var n int64
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// parseRunOptions applies NAME=VALUE pairs to Ollama's defaults. A value is read as JSON
// when it parses (numbers, true, lists) and as a string otherwise; stop may repeat.
// hasOption reports whether the -o pairs set name.
func hasOption(pairs []string, name string) bool {
	for _, p := range pairs {
		if k, _, _ := strings.Cut(p, "="); k == name {
			return true
		}
	}
	return false
}

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
	printDrafts(w, r.DraftTokens, r.DraftAccepted)
}
