package backend

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
)

// notOps are the interfaces of runner/compute that declare no compute operation, and
// why. Every other interface there is an operation's, and each of its methods needs
// an entry in the op table (opCase.ops), unless the checks call it anyway (harnessOps)
// or the streaming checks exercise it (streamOps).
var notOps = map[string]string{
	"Source":            "the loader's supply of checkpoint tensors",
	"StreamSource":      "the loader's supply of streamed weights (the streaming checks read through one)",
	"LayerStreamSource": "the loader's supply of streamed decoder layers (the streaming checks read through one)",
	"Weight":            "a bound matrix's dims and format",
	"Vector":            "a bound vector's length",
	"Tensor":            "an activation's dims",
	"Driver":            "opens a backend",
	"Group":             "membership of a group of processes (runner/pipeline)",
	"Distributed":       "joins a group of processes; doctor reports whether MLX's distributed layer is bound",
	"MemoryPlanner":     "the allocator's limits, no arithmetic",
	"unwrapper":         "a wrapping context's way to the one it wraps",
	"CarryContext":      "a pipeline stage's mark on what travels beside the residual stream (runner/pipeline's tests)",
	"StreamContext":     "a pipeline stage's mark on the residual stream itself (runner/pipeline's tests)",
}

// notOpMethods are methods of operation interfaces that compute nothing.
var notOpMethods = map[string]string{
	"Backend.Name": "a label for logs",
}

// computeMethods parses runner/compute's sources and returns "Interface.Method" for
// every method of every interface declared there, and the interfaces' names.
func computeMethods(t *testing.T) (methods, interfaces []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "compute", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("runner/compute's sources: %v %v", files, err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			it, ok := ts.Type.(*ast.InterfaceType)
			if !ok || ts.TypeParams != nil {
				return true
			}
			interfaces = append(interfaces, ts.Name.Name)
			for _, m := range it.Methods.List {
				for _, id := range m.Names { // an embedded interface has none: its methods are its own
					methods = append(methods, ts.Name.Name+"."+id.Name)
				}
			}
			return false
		})
	}
	return methods, interfaces
}

// TestDoctorOpTableCoversEveryOperation: every method of every operation interface of
// runner/compute (Context, its optional extensions, what a backend binds) has a check
// in the op table. A new operation fails here until its entry is added (one opCase,
// naming it in ops); a new interface that declares no operation goes into notOps.
func TestDoctorOpTableCoversEveryOperation(t *testing.T) {
	cases, err := opCases(1)
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]string{}
	for _, op := range slices.Concat(harnessOps, streamOps) {
		covered[op] = "every check"
	}
	for _, c := range cases {
		if len(c.ops) == 0 {
			t.Errorf("the check %q names no operation", c.name)
		}
		for _, op := range c.ops {
			covered[op] = c.name
		}
	}
	methods, interfaces := computeMethods(t)
	for name := range notOps {
		if !slices.Contains(interfaces, name) {
			t.Errorf("notOps names %s, which runner/compute no longer declares", name)
		}
	}
	exists := map[string]bool{}
	var missing []string
	for _, m := range methods {
		exists[m] = true
		iface := strings.Split(m, ".")[0]
		if _, ok := notOps[iface]; ok {
			continue
		}
		if _, ok := notOpMethods[m]; ok {
			continue
		}
		if _, ok := covered[m]; !ok {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		t.Errorf("operations without a check in the op table (runner/backend/check*.go): %v", missing)
	}
	for _, op := range slices.Sorted(maps.Keys(covered)) {
		if !exists[op] {
			t.Errorf("the check %q names %s, which is no method of runner/compute", covered[op], op)
		}
	}
	if len(methods) < 40 || !exists["Context.Linear"] || !exists["MoEContext.MoE"] {
		t.Fatalf("found only %d methods in runner/compute: %v", len(methods), methods)
	}
}

func TestDoctorCPUPassesEveryOpCheck(t *testing.T) {
	b := cpu.New(2)
	res, err := CheckOps(b, b, Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) < 40 {
		t.Fatalf("only %d checks ran", len(res))
	}
	for _, r := range res {
		if r.Against != "reference" {
			t.Errorf("%s compared with %s: the reference backend is not compared with itself", r.Check, r.Against)
		}
		if !r.OK() || r.Note != "" {
			t.Errorf("%s on %s: relative error %.3g (tolerance %.0e), %v %s", r.Check, r.Backend, r.RelErr, r.Tol, r.Err, r.Note)
		}
	}
}

// The CPU backend's 8-bit input path, checked as a backend under test of reduced
// precision against the float path: what doctor runs where MLX does not.
func TestDoctorCPUInt8PassesEveryOpCheck(t *testing.T) {
	ref, b := cpu.New(2), cpu.New(2)
	b.UseInt8(true)
	res, err := CheckOps(b, ref, Reduced, 1)
	if err != nil {
		t.Fatal(err)
	}
	against := map[string]int{}
	for _, r := range res {
		against[r.Against]++
		if !r.OK() {
			t.Errorf("%s on %s vs %s: relative error %.3g (tolerance %.0e), %v", r.Check, r.Backend, r.Against, r.RelErr, r.Tol, r.Err)
		}
		if r.RelErr > 0 {
			t.Logf("%-48s vs %-18s %.2e (tolerance %.0e)", r.Check, r.Against, r.RelErr, r.Tol)
		}
	}
	if against["reference"] != against[ref.Name()] || against["reference"] < 40 {
		t.Errorf("checks by reference: %v", against)
	}
}

// skewed is the CPU backend with a wrong SwiGLU, as a broken backend would have.
type skewed struct{ *cpu.Backend }

func (s skewed) Name() string { return "skewed" }
func (s skewed) NewContext() compute.Context {
	return skewedCtx{s.Backend.NewContext()}
}

type skewedCtx struct{ compute.Context }

func (c skewedCtx) SwiGLU(g, u compute.Tensor) compute.Tensor { return c.Mul(g, u) }

// Unwrap lets the optional operations through to the CPU context.
func (c skewedCtx) Unwrap() compute.Context { return c.Context }

func TestDoctorChecksCatchAWrongKernel(t *testing.T) {
	ref := cpu.New(2)
	res, err := CheckOps(skewed{cpu.New(2)}, ref, Reduced, 2)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, r := range res {
		if !r.OK() {
			failed[r.Check+" vs "+r.Against] = true
		}
	}
	if !failed["SwiGLU vs reference"] || !failed["SwiGLU vs "+ref.Name()] || len(failed) != 2 {
		t.Fatalf("failed checks %v, want exactly SwiGLU against the reference and the CPU", failed)
	}
}

// knownUncovered are the registered architectures registry/randmodel cannot write yet,
// which doctor reports as not covered. Teach randmodel the architecture (and, if Tiny's
// shape does not fit it, add a preset in registry/randmodel/tiny.go) and remove it here.
var knownUncovered []string // none: randmodel writes every registered architecture

// TestDoctorModelCoverage lists the registered architectures without a tiny checkpoint,
// and fails when that list changes: a newly registered architecture must be covered
// (or listed here), and one that becomes covered must leave the list.
func TestDoctorModelCoverage(t *testing.T) {
	unc := Uncovered()
	for _, mt := range slices.Sorted(maps.Keys(unc)) {
		t.Logf("not covered: %s: %s", mt, unc[mt])
	}
	if got := slices.Sorted(maps.Keys(unc)); !slices.Equal(got, knownUncovered) {
		t.Errorf("architectures without a tiny checkpoint: %v, want %v", got, knownUncovered)
	}
}

// TestDoctorModelsOnCPU runs the whole-model checks of every registered architecture
// on the CPU backend: the float path against itself, the backend as serve starts it
// (8-bit inputs in batches) against the float path, the streaming checks; and a wrong
// SwiGLU fails the logits.
func TestDoctorModelsOnCPU(t *testing.T) {
	models := TinyModels(t.TempDir(), 3)
	openCPU := func() (compute.Backend, error) { return cpu.New(2), nil }
	openInt8 := func() (compute.Backend, error) { b := cpu.New(2); b.UseInt8Batches(true); return b, nil }
	covered, streamed := map[string]bool{}, map[string]bool{}
	for _, m := range models {
		if m.Uncovered != "" {
			res := CheckModel(m, openCPU, nil, Float32)
			if len(res) != 1 || res[0].Status() != "NOT COVERED" || !strings.Contains(res[0].Uncovered, m.ModelType) {
				t.Errorf("%s: %+v", m.Name(), res)
			}
			continue
		}
		covered[m.ModelType] = true
		res := CheckModel(m, openCPU, nil, Float32)
		res = append(res, CheckModel(m, openInt8, openCPU, Reduced)...)
		if m.Format.Name == "4-bit" {
			s := CheckStreaming(m, openCPU, Float32)
			// Under its budget of one unit the model evicts, and a mixture of experts
			// guesses the next layer's experts (compute.ExpertGuesser).
			moe := m.ModelType == "qwen3_moe" || m.ModelType == "qwen3_next" || m.ModelType == "qwen3_5_moe"
			streamed[m.ModelType] = s.Stream != nil && s.Stream.Evictions > 0 && (!moe || s.Stream.Predicted > 0)
			res = append(res, s)
		}
		for _, r := range res {
			t.Logf("%-6s %-52s %-24s vs %-18s %.2e (tolerance %.0e) %s", r.Status(), r.Check, r.Backend, r.Against, r.RelErr, r.Tol, r.Note)
			if !r.OK() && r.Uncovered == "" {
				t.Errorf("%s on %s: %.3g (tolerance %.0e) %v", r.Check, r.Backend, r.RelErr, r.Tol, r.Err)
			}
		}
	}
	for _, mt := range []string{"llama", "qwen2", "qwen2_5_vl", "qwen3", "qwen3_moe", "gemma3_text", "qwen3_next", "qwen3_5", "qwen3_5_moe", "gemma4_text", "gemma4", "gpt_oss", "glm4_moe", "glm4_moe_lite"} {
		if !covered[mt] || !streamed[mt] {
			t.Errorf("%s: covered %v, streamed %v", mt, covered[mt], streamed[mt])
		}
	}
	var qwen3 TinyModel
	for _, m := range models {
		if m.ModelType == "qwen3" && m.Format.Name == "float32" {
			qwen3 = m
		}
	}
	res := CheckModel(qwen3, func() (compute.Backend, error) { return skewed{cpu.New(2)}, nil }, openCPU, Reduced)
	if len(res) != 2 || res[1].OK() {
		t.Fatalf("a wrong SwiGLU passed the logits check: %+v", res)
	}
}

// A greedy token may differ from the reference's only where the reference's logits of
// the two are within what the tolerance allows.
func TestDoctorSameGreedy(t *testing.T) {
	want := [][]float32{{0, 1, 4}, {2, 1.99, 0}}
	if n, err := sameGreedy([][]float32{{0, 1, 4}, {1.99, 2, 0}}, want, 1e-2); n != 1 || err != nil {
		t.Errorf("a near tie: %d agree, %v", n, err)
	}
	if n, err := sameGreedy([][]float32{{0, 5, 4}, {2, 1.99, 0}}, want, 1e-2); n != 0 || err == nil ||
		!strings.Contains(err.Error(), "greedy token 1 of 2 is 1, the reference's 2") {
		t.Errorf("a clear difference: %d agree, %v", n, err)
	}
}

// TestDoctorGptOssMXFP4: doctor checks gpt-oss as mlx-community ships it, the experts
// in mxfp4 beside 8-bit weights, and that checkpoint has them so.
func TestDoctorGptOssMXFP4(t *testing.T) {
	ms := TinyModelsOf(t.TempDir(), "gpt_oss", 5, ArchFormats["gpt_oss"]...)
	if len(ms) != 1 || ms[0].Err != nil || ms[0].Uncovered != "" {
		t.Fatalf("%+v", ms)
	}
	data, err := os.ReadFile(filepath.Join(ms[0].Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Quantization map[string]any `json:"quantization"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	experts := 0
	for k, v := range cfg.Quantization {
		if m, ok := v.(map[string]any); ok && m["mode"] == "mxfp4" {
			if !strings.Contains(k, "mlp.experts.") {
				t.Errorf("%s is mxfp4, which only the experts should be", k)
			}
			experts++
		}
	}
	if experts == 0 || cfg.Quantization["bits"] != float64(8) {
		t.Fatalf("quantization %v: want 8-bit with mxfp4 experts", cfg.Quantization)
	}
	openCPU := func() (compute.Backend, error) { return cpu.New(2), nil }
	for _, r := range CheckModel(ms[0], openCPU, openCPU, Float32) {
		if !r.OK() {
			t.Errorf("%s: %.3g (tolerance %.0e) %v", r.Check, r.RelErr, r.Tol, r.Err)
		}
	}
}
