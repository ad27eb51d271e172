package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dustin/go-humanize"
	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
)

const createHelp = `Convert a Hugging Face checkpoint (safetensors, bf16/fp16/fp32) to the MLX format and store it
under NAME, as mlx_lm.convert lays it out. With --quantize, the linear and embedding weights are
quantized (MLX affine mode: q2, q3, q4, q5, q6 or q8 bits per weight, --group-size 32, 64 or 128),
config.json gets the quantization block, norms and biases stay in the model dtype.

A bare NAME ("mymodel" or "mymodel:tag") is stored as the repo local/mymodel and run as
"mlxg run mymodel"; an org/name NAME is stored as that repo. --output writes the converted
checkpoint to a directory instead of the store.

With -f Modelfile, create works as ollama create does, through the server at MLXG_HOST (or in-process
when none answers): FROM a model (its weights shared) or a checkpoint folder (uploaded), with PARAMETER,
SYSTEM, MESSAGE and LICENSE lines; TEMPLATE and ADAPTER are refused.

--experts mxfp4 stores a mixture-of-experts model's experts in MLX's mxfp4 mode, as mlx-community
ships gpt-oss (gpt-oss-20b-MXFP4-Q8 is --experts mxfp4 --quantize q8). OpenAI's gpt-oss checkpoints,
whose experts are mxfp4 already, convert with their experts kept as they are.`

func newCreateCmd() *cobra.Command {
	var from, quantize, dtype, output, file, experts string
	var group int
	cmd := &cobra.Command{
		Use:   "create NAME (--from DIR | -f Modelfile)",
		Short: "Create a model from a Hugging Face checkpoint or a Modelfile",
		Long:  createHelp,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" && from == "" {
				if _, err := os.Stat("Modelfile"); err == nil { // as ollama create: ./Modelfile by default
					file = "Modelfile"
				}
			}
			if file != "" {
				if from != "" || output != "" {
					return fmt.Errorf("-f Modelfile does not go with --from or --output: the Modelfile's FROM line names the source")
				}
				if len(args) == 0 {
					return fmt.Errorf("give the NAME to create")
				}
				return createFromModelfile(cmd, args[0], file, quantize)
			}
			if from == "" {
				return fmt.Errorf("--from DIR or -f Modelfile is required: the Hugging Face checkpoint to convert, or the Modelfile to create from")
			}
			if len(args) == 0 && output == "" {
				return fmt.Errorf("give the NAME to store the model under, or --output DIR")
			}
			bits, err := create.ParseQuantize(quantize)
			if err != nil {
				return err
			}
			out := cmd.ErrOrStderr()
			opts := create.Options{Bits: bits, GroupSize: group, DType: dtype, Experts: quant.Mode(experts)}
			if f, ok := out.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
				opts.Progress = func(done, total int) {
					fmt.Fprintf(out, "\rconverting tensors: %d/%d", done, total)
					if done == total {
						fmt.Fprintln(out)
					}
				}
			}
			var sum *create.Summary
			if output != "" {
				fmt.Fprintf(out, "converting %s to %s\n", from, output)
				if sum, err = create.Convert(cmd.Context(), from, output, opts); err != nil {
					return err
				}
				printSummary(cmd, sum, output)
				return nil
			}
			name, err := registry.ParseName(args[0])
			if err != nil {
				return err
			}
			store, err := registry.DefaultStore()
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "converting %s\n", from)
			m, sum, err := create.Create(cmd.Context(), store, name, from, opts)
			if err != nil {
				return err
			}
			printSummary(cmd, sum, m.Dir)
			fmt.Fprintf(cmd.OutOrStdout(), "created %s (%s, commit %s, %s)\n", m.Name, m.Repo, m.ID(), humanize.Bytes(uint64(m.Size)))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the Hugging Face checkpoint directory to convert")
	f.StringVarP(&quantize, "quantize", "q", "", "quantize to q2, q3, q4, q5, q6 or q8 (MLX affine)")
	f.IntVar(&group, "group-size", 64, "quantization group size: 32, 64 or 128")
	f.StringVar(&dtype, "dtype", "", "dtype of unquantized weights, scales and biases: float16, bfloat16 or float32 (default: config.json's torch_dtype)")
	f.StringVar(&experts, "experts", "", "mode of a mixture-of-experts model's experts: mxfp4 (default: as --quantize)")
	f.StringVar(&output, "output", "", "write the converted checkpoint to this directory instead of the store")
	f.StringVarP(&file, "file", "f", "", "create from this Modelfile (FROM, PARAMETER, SYSTEM, MESSAGE, LICENSE), as ollama create does (default: ./Modelfile when there is one and no --from)")
	return cmd
}

// modelCreator is what create -f needs: api.Client (a running server) and server.Models (in-process).
type modelCreator interface {
	CreateBlob(ctx context.Context, digest string, r io.Reader) error
	Create(ctx context.Context, req *api.CreateRequest, fn func(api.ProgressResponse) error) error
}

// createFromModelfile is ollama create's flow: parse, upload FROM's local files as blobs, create.
func createFromModelfile(cmd *cobra.Command, name, file, quantize string) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("reading the Modelfile: %w", err)
	}
	req, uploads, err := api.ParseModelfile(f, filepath.Dir(file))
	f.Close()
	if err != nil {
		return err
	}
	req.Model, req.Quantize = name, quantize
	out := cmd.ErrOrStderr()
	run := func(svc modelCreator) error {
		for _, u := range uploads {
			fmt.Fprintf(out, "copying file %s\n", filepath.Base(u.Path))
			r, err := os.Open(u.Path)
			if err != nil {
				return err
			}
			err = svc.CreateBlob(cmd.Context(), u.Digest, r)
			r.Close()
			if err != nil {
				return err
			}
		}
		last := ""
		return svc.Create(cmd.Context(), req, func(p api.ProgressResponse) error {
			if p.Status != last && p.Digest == "" {
				fmt.Fprintln(out, p.Status)
			}
			last = p.Status
			return nil
		})
	}
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return err
	}
	if err = run(c); api.Unreachable(err) {
		m, merr := server.NewModels()
		if merr != nil {
			return merr
		}
		err = run(m)
	}
	return err
}

func printSummary(cmd *cobra.Command, s *create.Summary, dir string) {
	what := "unquantized"
	if s.Bits > 0 {
		what = fmt.Sprintf("%d-bit, group %d", s.Bits, s.Group)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %d weights quantized, %d kept, %d dropped; %s of weights, %.2f bits per weight\n",
		what, s.DType, len(s.Quantized), s.Kept, len(s.Dropped), humanize.Bytes(uint64(s.BytesWritten)), s.BitsPerWeight)
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: the checkpoint has no tokenizer.json; mlxg run needs one")
	}
}
