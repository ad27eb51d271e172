// Package create converts a Hugging Face safetensors checkpoint (float32, float16 or
// bfloat16 weights) into the MLX format, as `mlx_lm.convert` lays it out, and stores
// the result (`mlxg create`).
//
// What it writes, following mlx-lm (mlx_lm/convert.py, mlx_lm/utils.py):
//   - non-quantized weights cast to the model dtype: --dtype, else config.json's
//     torch_dtype (or dtype), else the checkpoint's own float type;
//   - with quantization (affine mode, bits 2, 3, 4, 5, 6 or 8, group size 32, 64 or
//     128): every linear and embedding weight — the 2-D "*.weight" tensors, which in
//     llama, qwen2 and qwen3 are exactly the nn.Linear and nn.Embedding modules
//     mlx-lm quantizes, embed_tokens and an untied lm_head included — whose input
//     dimension is a multiple of the group size becomes "<name>.weight" (uint32
//     codes, internal/quant's packing), "<name>.scales" and "<name>.biases" (model
//     dtype). The weights are rounded to the model dtype before quantizing and the
//     scales and biases after, as MLX does. Norms and biases stay as they are;
//   - for qwen3_moe, qwen3_next, qwen3_5 and qwen3_5_moe, what mlx-lm's sanitize does
//     (families.go): experts stacked (or fused ones split) into switch_mlp tensors
//     (quantized per expert row), routers at 8 bits, the Gated DeltaNet models' conv1d
//     layout, norm offsets and dropped mtp weights, and Qwen3.5/3.6's language_model
//     renames with the vision tower dropped;
//   - config.json with "quantization" and "quantization_config" blocks
//     {"group_size", "bits", "mode": "affine"};
//   - lm_head.weight dropped when tie_word_embeddings is set, rotary_emb.inv_freq
//     buffers dropped;
//   - shards of at most 5 GB (model.safetensors, or model-0000i-of-0000n.safetensors),
//     always with model.safetensors.index.json, metadata {"format": "mlx"};
//   - the tokenizer files and generation_config.json copied.
//
// Input that is already quantized, not safetensors, or holds non-float weights is
// refused with an error naming the file or tensor; a model_type this program does not
// run (registry.CheckArchitecture) is refused before any tensor is read.
package create

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/internal/files"
	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/safetensors"
)

// Options say how to convert.
type Options struct {
	Bits      int    // 0: no quantization; else 2, 3, 4, 5, 6 or 8
	GroupSize int    // 32, 64 or 128; 0 means 64 (mlx-lm's default)
	DType     string // "float16", "bfloat16", "float32" or "" (from config.json, else the weights)
	// Experts, when quant.MXFP4, stores the stacked expert matrices in mxfp4 (as
	// mlx-community ships gpt-oss: "MXFP4-Q8" is Experts mxfp4 with Bits 8), the other
	// weights as Bits says. "" quantizes the experts like every other weight.
	Experts quant.Mode
	// MaxShardBytes bounds each output file; 0 means 5 GB as mlx-lm writes them.
	MaxShardBytes int64
	// Logf, when set, receives one line per step.
	Logf func(format string, args ...any)
	// Progress, when set, is called after each tensor with the count done and the total.
	Progress func(done, total int)
}

// Summary describes a finished conversion.
type Summary struct {
	DType         string
	Bits, Group   int
	Quantized     []string // names of the quantized weights
	Kept          int      // tensors written unquantized
	Dropped       []string // tensors left out (tied lm_head, rotary buffers)
	Parameters    int64
	BytesWritten  int64
	BitsPerWeight float64
}

// ParseQuantize reads a --quantize value: q2, q3, q4, q5, q6 or q8 (case-insensitive),
// or "" for none.
func ParseQuantize(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	t := strings.ToLower(s)
	if b, err := strconv.Atoi(strings.TrimPrefix(t, "q")); err == nil && strings.HasPrefix(t, "q") && quant.CheckAffine(b, 64) == nil {
		return b, nil
	}
	return 0, fmt.Errorf("unsupported quantization %q: use q2, q3, q4, q5, q6 or q8 (MLX affine, bits per weight)", s)
}

var dtypeOf = map[string]safetensors.DType{
	"float32": safetensors.F32, "float16": safetensors.F16, "bfloat16": safetensors.BF16,
}

var nameOf = map[safetensors.DType]string{
	safetensors.F32: "float32", safetensors.F16: "float16", safetensors.BF16: "bfloat16",
}

// Create converts the checkpoint in src and imports it into store under name.
func Create(ctx context.Context, store *registry.Store, name registry.Name, src string, opts Options) (*registry.LocalModel, *Summary, error) {
	tmp, err := os.MkdirTemp("", "mlxg-create-*")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "model")
	sum, err := Convert(ctx, src, out, opts)
	if err != nil {
		return nil, nil, err
	}
	m, err := store.ImportDir(ctx, name, out)
	if err != nil {
		return nil, nil, err
	}
	return m, sum, nil
}

// Convert writes the MLX form of the checkpoint in src into dst, which must not exist
// or be empty.
func Convert(ctx context.Context, src, dst string, opts Options) (*Summary, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if opts.GroupSize == 0 {
		opts.GroupSize = 64
	}
	if opts.Bits != 0 {
		if err := quant.CheckAffine(opts.Bits, opts.GroupSize); err != nil {
			return nil, fmt.Errorf("create: %w", err)
		}
	}
	if opts.MaxShardBytes <= 0 {
		opts.MaxShardBytes = 5 << 30
	}
	if entries, err := os.ReadDir(dst); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("create: output directory %s is not empty: choose a new one", dst)
	}

	cfgPath := filepath.Join(src, "config.json")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, fmt.Errorf("create: %s is not a Hugging Face checkpoint: %w", src, err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("create: %s: %w", cfgPath, err)
	}
	// Converting gigabytes only to find at the first load that no architecture runs them helps no one.
	if err := registry.CheckArchitecture(raw); err != nil {
		return nil, fmt.Errorf("create: %s: %w", src, err)
	}
	if _, err := os.Stat(filepath.Join(src, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(src, "tekken.json")); err == nil {
			return nil, fmt.Errorf("create: %s has Mistral's tekken.json but no tokenizer.json, which mlxg reads: use a repo that ships tokenizer.json (Mistral's transformers-format repos do), or write it from tekken.json with transformers' convert_tekken_tokenizer", src)
		}
	}
	if _, ok := cfg["quantization"]; ok {
		return nil, fmt.Errorf("create: %s is already an MLX quantized checkpoint (config.json has a quantization block): start from the unquantized Hugging Face weights", src)
	}
	openaiMXFP4 := false // OpenAI's gpt-oss checkpoints: mxfp4 experts, kept as they are
	fp8 := false         // FP8 weights with their scales (fp8.go), dequantized
	if qc, ok := cfg["quantization_config"]; ok {
		m, _ := qc.(map[string]any)
		switch {
		case m["quant_method"] == "mxfp4" && cfg["model_type"] == "gpt_oss":
			openaiMXFP4 = true
		case m["quant_method"] == "fp8":
			fp8 = true
		default:
			return nil, fmt.Errorf("create: %s is quantized (%v): start from bf16, fp16 or fp32 weights", src, qc)
		}
		delete(cfg, "quantization_config")
	}
	if opts.Experts != "" && opts.Experts != quant.MXFP4 {
		return nil, fmt.Errorf("create: experts in %q: only mxfp4 is supported", opts.Experts)
	}

	ck, err := safetensors.OpenDir(src)
	if err != nil {
		if bins, _ := filepath.Glob(filepath.Join(src, "*.bin")); len(bins) > 0 {
			return nil, fmt.Errorf("create: %s has PyTorch .bin weights only: convert them to safetensors first (%w)", src, err)
		}
		return nil, fmt.Errorf("create: %w", err)
	}
	defer ck.Close()

	names := ck.Names()
	for _, n := range names {
		t, _ := ck.Tensor(n)
		if strings.HasSuffix(n, ".scales") {
			return nil, fmt.Errorf("create: %s: tensor %s shows the checkpoint is already quantized: start from unquantized weights", src, n)
		}
		mx := openaiMXFP4 && t.DType == safetensors.U8 && (strings.HasSuffix(n, "_blocks") || strings.HasSuffix(n, "_scales"))
		mx = mx || fp8 && t.DType == safetensors.F8E4M3
		if _, ok := nameOf[t.DType]; !ok && t.DType != safetensors.F64 && !mx {
			return nil, fmt.Errorf("create: %s: tensor %s has dtype %s: only float32, float16 and bfloat16 checkpoints can be converted", src, n, t.DType)
		}
	}

	// The model dtype, as mlx-lm picks it.
	dtName := opts.DType
	if dtName == "" {
		for _, key := range []string{"torch_dtype", "dtype"} {
			if s, ok := cfg[key].(string); ok {
				if _, known := dtypeOf[s]; known {
					dtName = s
					break
				}
			}
		}
	}
	if dtName == "" {
		for _, n := range names {
			t, _ := ck.Tensor(n)
			if s, ok := nameOf[t.DType]; ok {
				dtName = s
				break
			}
		}
	}
	dt, ok := dtypeOf[dtName]
	if !ok {
		return nil, fmt.Errorf("create: dtype %q: use float16, bfloat16 or float32", dtName)
	}

	tied, _ := cfg["tie_word_embeddings"].(bool)
	if tc, ok := cfg["text_config"].(map[string]any); ok && cfg["tie_word_embeddings"] == nil {
		tied, _ = tc["tie_word_embeddings"].(bool) // a multimodal model's language model
	}
	sum := &Summary{DType: dtName, Bits: opts.Bits, Group: opts.GroupSize}
	if opts.Bits == 0 {
		sum.Group = 0
	}

	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, err
	}
	fam := newFamily(cfg)
	stacks, err := fam.stacks(ck, names)
	if err != nil {
		return nil, err
	}
	overrides := map[string]any{}
	mxfp4Modules := 0 // modules written in mxfp4
	mxfp4Block := map[string]any{"group_size": 32, "bits": 4, "mode": "mxfp4"}
	w := &shardWriter{dir: dst, limit: opts.MaxShardBytes}
	// emit writes one output tensor: quantized when it is a linear (or stacked expert)
	// weight whose input width the group divides, else cast to the model dtype.
	emit := func(j job) error {
		out, shape, rows := j.out, j.shape, j.rows
		bits, groupSize := opts.Bits, opts.GroupSize
		base := strings.TrimSuffix(out, ".weight")
		if j.mxfp4 != nil || (j.stacked && opts.Experts == quant.MXFP4 && shape[len(shape)-1]%32 == 0) {
			lead, in := shape[:len(shape)-1], shape[len(shape)-1]
			var packed, scales []byte
			if j.mxfp4 != nil {
				packed, scales = j.mxfp4()
			} else {
				nrows := 1
				for _, d := range lead {
					nrows *= d
				}
				words, groups := in/8, in/32
				p32, sc := make([]uint32, nrows*words), make([]uint8, nrows*groups)
				rows(nrows, in, func(r0 int, vals []float32) {
					for i := range len(vals) / in {
						r := r0 + i
						quant.QuantizeMXFP4Row(p32[r*words:(r+1)*words], sc[r*groups:(r+1)*groups], vals[i*in:(i+1)*in])
					}
				})
				packed, scales = u32Bytes(p32), sc
			}
			mxfp4Modules++
			overrides[base] = mxfp4Block
			sum.Quantized = append(sum.Quantized, out)
			logf("%s %v in mxfp4", out, shape)
			return w.add(
				safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: safetensors.U32, Shape: append(slices.Clone(lead), in/8)}, Data: packed},
				safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + ".scales", DType: safetensors.U8, Shape: append(slices.Clone(lead), in/32)}, Data: scales})
		}
		if b, g, ok := fam.override(base); ok && bits > 0 {
			bits, groupSize = b, g // 0 bits: kept in float
		}
		var err error
		elems := 1
		for _, d := range shape {
			elems *= d
		}
		cols := elems
		if len(shape) > 0 {
			cols = shape[len(shape)-1]
		}
		if bits > 0 && (len(shape) == 2 || (len(shape) == 3 && j.stacked)) && strings.HasSuffix(out, ".weight") && cols%groupSize == 0 {
			nrows := 1
			for _, d := range shape[:len(shape)-1] {
				nrows *= d
			}
			words, groups := quant.Words(cols, bits), cols/groupSize
			packed := make([]uint32, nrows*words)
			scales := make([]float32, nrows*groups)
			biases := make([]float32, nrows*groups)
			rows(nrows, cols, func(r0 int, vals []float32) {
				for i := range len(vals) / cols {
					r := r0 + i
					quant.QuantizeRow(packed[r*words:(r+1)*words], scales[r*groups:(r+1)*groups], biases[r*groups:(r+1)*groups],
						vals[i*cols:(i+1)*cols], bits, groupSize)
				}
			})
			lead := shape[:len(shape)-1]
			gshape := append(slices.Clone(lead), groups)
			err = w.add(
				safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: safetensors.U32, Shape: append(slices.Clone(lead), words)}, Data: u32Bytes(packed)},
				safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + ".scales", DType: dt, Shape: gshape}, Data: encode(scales, dt)},
				safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: base + ".biases", DType: dt, Shape: gshape}, Data: encode(biases, dt)})
			if bits != opts.Bits || groupSize != opts.GroupSize {
				overrides[base] = map[string]any{"group_size": groupSize, "bits": bits}
			}
			sum.Quantized = append(sum.Quantized, out)
			logf("quantized %s %v to %d bits, group %d", out, shape, bits, groupSize)
		} else {
			n := 1
			for _, d := range shape {
				n *= d
			}
			tdt := dt
			if j.f32 {
				tdt = safetensors.F32
			}
			data := make([]byte, n*tdt.Size())
			one := fam.plusOne(out, shape)
			if cols > 0 {
				rows(n/cols, cols, func(r0 int, vals []float32) {
					if one {
						for i := range vals {
							vals[i]++
						}
					}
					encodeInto(data[r0*cols*tdt.Size():], vals, tdt)
				})
			}
			err = w.add(safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: out, DType: tdt, Shape: shape}, Data: data})
			sum.Kept++
		}
		return err
	}
	for i, n := range names {
		if opts.Progress != nil && i > 0 {
			opts.Progress(i, len(names))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if strings.HasSuffix(n, "rotary_emb.inv_freq") || (tied && n == "lm_head.weight") || fam.drop(n) || (fp8 && fp8Dropped(n)) {
			sum.Dropped = append(sum.Dropped, n)
			continue
		}
		t, _ := ck.Tensor(n)
		sum.Parameters += t.NumElements()
		if t.DType == safetensors.F8E4M3 {
			rows, err := fp8Rows(ck, n, t, dt)
			if err != nil {
				return nil, err
			}
			if err := emit(job{out: fam.rename(n), shape: fam.shape(n, t.Shape), rows: rows}); err != nil {
				return nil, err
			}
			continue
		}
		for _, j := range fam.jobs(ck, n, t, dt, stacks) {
			if err := emit(j); err != nil {
				return nil, err
			}
		}
	}
	if opts.Progress != nil {
		opts.Progress(len(names), len(names))
	}
	if err := w.finish(sum.Parameters); err != nil {
		return nil, err
	}
	sum.BytesWritten = w.total
	if sum.Parameters > 0 {
		sum.BitsPerWeight = float64(w.total) * 8 / float64(sum.Parameters)
	}

	if opts.Bits > 0 || mxfp4Modules > 0 {
		q := map[string]any{"group_size": opts.GroupSize, "bits": opts.Bits, "mode": "affine"}
		for module, o := range overrides {
			q[module] = o
		}
		if opts.Bits == 0 { // only the experts are quantized: mxfp4 is the default, and only
			// modules with scales are read as quantized
			q = mxfp4Block
		}
		cfg["quantization"] = q
		cfg["quantization_config"] = q
	}
	delete(cfg, "_name_or_path")
	b, err := json.MarshalIndent(cfg, "", "    ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dst, "config.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
		"chat_template.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json", "generation_config.json",
		"preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"} {
		if err := files.Copy(filepath.Join(src, f), filepath.Join(dst, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("create: copying %s: %w", f, err)
		}
	}
	logf("wrote %s: %d quantized, %d kept, %d dropped, %.2f bits per weight", dst, len(sum.Quantized), sum.Kept, len(sum.Dropped), sum.BitsPerWeight)
	return sum, nil
}

// forRows decodes t (rows×cols, F32/F16/BF16/F64) block by block, rounds the values
// to dt, and calls fn with each block's first row and values; blocks of about 1M
// values run on all cores, so memory stays bounded whatever the tensor's size.
func forRows(t *safetensors.Tensor, rows, cols int, dt safetensors.DType, fn func(r0 int, vals []float32)) {
	forRowsOf(t, 0, rows, cols, dt, fn)
}

// forRowsOf is forRows over rows first .. first+rows-1 of t, numbered from 0.
func forRowsOf(t *safetensors.Tensor, first, rows, cols int, dt safetensors.DType, fn func(r0 int, vals []float32)) {
	if first > 0 {
		size := t.DType.Size()
		sub := *t
		sub.Data = t.Data[first*cols*size : (first+rows)*cols*size]
		t = &sub
	}
	block := max(1, (1<<20)/cols)
	next := make(chan int, (rows+block-1)/block)
	for r := 0; r < rows; r += block {
		next <- r
	}
	close(next)
	size := t.DType.Size()
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), (rows+block-1)/block) {
		wg.Go(func() {
			buf := make([]float32, block*cols)
			for r0 := range next {
				n := min(block, rows-r0) * cols
				vals, src := buf[:n], t.Data[r0*cols*size:(r0*cols+n)*size]
				switch t.DType {
				case safetensors.F32:
					for i := range vals {
						vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
					}
				case safetensors.F16:
					half.DecodeF16(vals, src)
				case safetensors.BF16:
					half.DecodeBF16(vals, src)
				case safetensors.F64:
					for i := range vals {
						vals[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
					}
				}
				roundTo(vals, dt)
				fn(r0, vals)
			}
		})
	}
	wg.Wait()
}

// roundTo rounds float32 values to what dtype dt can hold, in place.
func roundTo(v []float32, dt safetensors.DType) {
	switch dt {
	case safetensors.F16:
		for i, f := range v {
			v[i] = half.F16ToF32(half.F32ToF16(f))
		}
	case safetensors.BF16:
		for i, f := range v {
			v[i] = half.BF16ToF32(half.F32ToBF16(f))
		}
	}
}

func encode(v []float32, dt safetensors.DType) []byte {
	out := make([]byte, len(v)*dt.Size())
	encodeInto(out, v, dt)
	return out
}

// encodeInto writes v into dst in dtype dt.
func encodeInto(out []byte, v []float32, dt safetensors.DType) {
	switch dt {
	case safetensors.F32:
		for i, f := range v {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		}
	case safetensors.F16:
		half.EncodeF16(out, v)
	case safetensors.BF16:
		half.EncodeBF16(out, v)
	}
}

func u32Bytes(v []uint32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], x)
	}
	return out
}

// shardWriter collects tensors and writes them as shards of at most limit bytes
// (a single larger tensor gets a shard of its own). Shards are written under
// temporary names first, since the final names (model-0000i-of-0000n) need the count.
type shardWriter struct {
	dir     string
	limit   int64
	pending []safetensors.Tensor
	size    int64
	files   []string   // temporary shard names, in order
	tensors [][]string // tensor names per shard
	total   int64
}

// add queues tensors that belong together (a weight with its scales and biases),
// writing out the pending shard first if they would push it over the limit.
func (w *shardWriter) add(ts ...safetensors.Tensor) error {
	var n int64
	for _, t := range ts {
		n += int64(len(t.Data))
	}
	if w.size > 0 && w.size+n > w.limit {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.pending = append(w.pending, ts...)
	w.size += n
	w.total += n
	return nil
}

func (w *shardWriter) flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	name := fmt.Sprintf(".shard-%05d.safetensors", len(w.files))
	// Aligned, so that the CPU backend reads every weight in place from the mapping.
	if err := safetensors.Write(filepath.Join(w.dir, name), safetensors.AlignedOrder(w.pending), map[string]string{"format": "mlx"}); err != nil {
		return err
	}
	var names []string
	for _, t := range w.pending {
		names = append(names, t.Name)
	}
	w.files = append(w.files, name)
	w.tensors = append(w.tensors, names)
	w.pending, w.size = nil, 0
	return nil
}

// finish writes the last shard, names the shards and writes the index (keys sorted,
// as encoding/json writes maps).
func (w *shardWriter) finish(params int64) error {
	if err := w.flush(); err != nil {
		return err
	}
	n := len(w.files)
	weightMap := map[string]string{}
	for i, tmp := range w.files {
		name := "model.safetensors"
		if n > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, n)
		}
		if err := os.Rename(filepath.Join(w.dir, tmp), filepath.Join(w.dir, name)); err != nil {
			return err
		}
		for _, t := range w.tensors[i] {
			weightMap[t] = name
		}
	}
	index := map[string]any{
		"metadata":   map[string]any{"total_size": w.total, "total_parameters": params},
		"weight_map": weightMap,
	}
	b, err := json.MarshalIndent(index, "", "    ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(w.dir, safetensors.IndexFile), append(b, '\n'), 0o644)
}
