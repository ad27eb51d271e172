package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/mlxg/mlxg/internal/half"
)

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestWriteOpenRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	a := randFloats(r, 6*5)
	b := randFloats(r, 7)
	bf := make([]byte, 2*len(b))
	half.EncodeBF16(bf, b)
	codes := make([]byte, 4*3)
	for i := range codes {
		codes[i] = byte(r.IntN(256))
	}
	in := []Tensor{
		{TensorInfo{Name: "a.weight", DType: F32, Shape: []int{6, 5}}, f32Bytes(a)},
		{TensorInfo{Name: "b.bias", DType: BF16, Shape: []int{7}}, bf},
		{TensorInfo{Name: "q.weight", DType: U32, Shape: []int{1, 3}}, codes},
		{TensorInfo{Name: "empty", DType: F16, Shape: []int{0, 4}}, nil},
	}
	if err := Write(path, in, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Header.Metadata["format"] != "mlx" {
		t.Fatalf("metadata %v", f.Header.Metadata)
	}
	if f.Header.DataOffset%8 != 0 {
		t.Fatalf("data section not 8-byte aligned: %d", f.Header.DataOffset)
	}
	ta, _ := f.Tensor("a.weight")
	got, err := ta.Float32s()
	if err != nil || len(got) != len(a) {
		t.Fatal(err)
	}
	for i := range a {
		if got[i] != a[i] {
			t.Fatalf("a[%d] %v != %v", i, got[i], a[i])
		}
	}
	tb, _ := f.Tensor("b.bias")
	gb, _ := tb.Float32s()
	for i := range b {
		if gb[i] != half.BF16ToF32(half.F32ToBF16(b[i])) {
			t.Fatalf("b[%d]", i)
		}
	}
	tq, _ := f.Tensor("q.weight")
	if string(tq.Data) != string(codes) || tq.Shape[1] != 3 {
		t.Fatal("u32 data differs")
	}
	if _, err := tq.Float32s(); err == nil {
		t.Fatal("Float32s on U32 should fail")
	}
	h, err := ReadHeader(path)
	if err != nil || len(h.Tensors) != 4 {
		t.Fatalf("ReadHeader: %v %v", h, err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("written file mode: %v %v", st.Mode(), err)
	}
	// no temp files left behind
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("stray files: %v", ents)
	}
}

// writeRaw writes a file with a hand-made header and data section.
func writeRaw(t *testing.T, header string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	b = append(b, data...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBadHeaders(t *testing.T) {
	cases := []struct {
		name, header string
		data         int
		want         string
	}{
		{"not json", `{"a": nope}`, 0, "not a JSON object"},
		{"unknown dtype", `{"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}}`, 2, `"w" has unknown dtype "Q4"`},
		{"size mismatch", `{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}`, 12, `"w": shape [2 2]`},
		{"outside", `{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 8, "outside the 8-byte data section"},
		{"negative", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}}`, 8, "outside"},
		{"overlap", `{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8, "overlap"},
		{"overlap past empty", `{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"c":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}}`, 8, "overlap"},
		{"offsets", `{"w":{"dtype":"U8","shape":[4],"data_offsets":[0]}}`, 4, "data_offsets"},
		{"bad shape", `{"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0, "invalid shape"},
		{"huge shape", `{"w":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,0]}}`, 0, "invalid shape"},
		{"metadata", `{"__metadata__":{"a":1}}`, 0, "__metadata__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeRaw(t, c.header, make([]byte, c.data))
			_, err := Open(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: got %v, want an error naming the file and containing %q", err, c.want)
			}
			if _, err := ReadHeader(path); err == nil {
				t.Fatal("ReadHeader accepted it")
			}
		})
	}
}

func TestBadLengths(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.safetensors")
	os.WriteFile(short, []byte{1, 2, 3}, 0o644)
	if _, err := Open(short); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("short file: %v", err)
	}
	big := filepath.Join(dir, "big.safetensors")
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b, 1<<40)
	os.WriteFile(big, b, 0o644)
	if _, err := Open(big); err == nil || !strings.Contains(err.Error(), "out of bounds") {
		t.Fatalf("huge header length: %v", err)
	}
	empty := filepath.Join(dir, "empty.safetensors")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Open(empty); err == nil {
		t.Fatal("empty file accepted")
	}
	// a truncated real file: header promises more data than remains
	good := filepath.Join(dir, "good.safetensors")
	if err := Write(good, []Tensor{{TensorInfo{Name: "w", DType: F32, Shape: []int{64}}, make([]byte, 256)}}, nil); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	os.WriteFile(good, data[:len(data)-10], 0o644)
	if _, err := Open(good); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Fatalf("truncated file: %v", err)
	}
}

func TestShardedCheckpoint(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	dir := t.TempDir()
	x, y := randFloats(r, 8), randFloats(r, 4)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(Write(filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{{TensorInfo{Name: "x", DType: F32, Shape: []int{2, 4}}, f32Bytes(x)}}, nil))
	must(Write(filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{{TensorInfo{Name: "y", DType: F32, Shape: []int{4}}, f32Bytes(y)}}, nil))
	index := func(m map[string]string) {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 48}, "weight_map": m})
		must(os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644))
	}
	index(map[string]string{"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"})
	c, err := OpenDir(dir)
	must(err)
	if got := c.Names(); len(got) != 2 || got[0] != "x" || got[1] != "y" {
		t.Fatalf("names %v", got)
	}
	ty, ok := c.Tensor("y")
	if !ok {
		t.Fatal("y missing")
	}
	gy, _ := ty.Float32s()
	if gy[3] != y[3] {
		t.Fatal("y data")
	}
	c.Close()
	hs, err := ReadDirHeaders(dir)
	if err != nil || len(hs) != 2 {
		t.Fatalf("ReadDirHeaders: %v", err)
	}

	index(map[string]string{"x": "model-00002-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"})
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Fatalf("wrong index accepted: %v", err)
	}
	index(map[string]string{"x": "../../etc/passwd"})
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), "not a file name") {
		t.Fatalf("path traversal in index: %v", err)
	}
	os.Remove(filepath.Join(dir, IndexFile))
	c, err = OpenDir(dir) // no index: every *.safetensors
	must(err)
	c.Close()
	if _, err := OpenDir(t.TempDir()); err == nil {
		t.Fatal("empty dir accepted")
	}
}

func TestDuplicateAcrossShards(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.safetensors", "b.safetensors"} {
		if err := Write(filepath.Join(dir, n), []Tensor{{TensorInfo{Name: "w", DType: U8, Shape: []int{1}}, []byte{1}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("duplicate tensor accepted: %v", err)
	}
}

func TestWriteRejects(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := Write(p, []Tensor{{TensorInfo{Name: "w", DType: F32, Shape: []int{3}}, make([]byte, 8)}}, nil); err == nil {
		t.Fatal("wrong data length accepted")
	}
	if err := Write(p, []Tensor{{TensorInfo{Name: "w", DType: "X"}, nil}}, nil); err == nil {
		t.Fatal("unknown dtype accepted")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatal("a failed write left a file")
	}
}

func FuzzHeader(f *testing.F) {
	f.Add([]byte(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), uint8(8))
	f.Add([]byte(`{"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`), uint8(1))
	f.Fuzz(func(t *testing.T, header []byte, dataLen uint8) {
		h, err := parseHeader("fuzz", header, int64(dataLen))
		if err != nil {
			return
		}
		var end int64
		for _, ti := range h.Tensors {
			if ti.Begin < end && ti.End > ti.Begin {
				t.Fatalf("overlap accepted: %+v", h.Tensors)
			}
			if ti.End > int64(dataLen) || ti.End-ti.Begin != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("bad range accepted: %+v", ti)
			}
			if ti.End > end {
				end = ti.End
			}
		}
	})
}

// TestWriteAligns: written in AlignedOrder, a tensor of an odd size (Gemma 4's one-element
// bfloat16 layer_scalar, an odd-length vector) does not shift the tensors after it: every
// tensor of the file starts at a multiple of its element size, in the file and in the
// mapping, and the contents round-trip under their names.
func TestWriteAligns(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	bytesOf := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return b
	}
	in := []Tensor{
		{TensorInfo{Name: "layers.0.layer_scalar", DType: BF16, Shape: []int{1}}, bytesOf(2)},
		{TensorInfo{Name: "layers.0.mlp.weight", DType: U32, Shape: []int{3, 1}}, bytesOf(12)},
		{TensorInfo{Name: "layers.0.mlp.scales", DType: BF16, Shape: []int{3}}, bytesOf(6)},
		{TensorInfo{Name: "layers.0.flag", DType: U8, Shape: []int{3}}, bytesOf(3)},
		{TensorInfo{Name: "layers.0.q.weight", DType: U32, Shape: []int{2, 3}}, bytesOf(24)},
		{TensorInfo{Name: "layers.1.layer_scalar", DType: BF16, Shape: []int{1}}, bytesOf(2)},
		{TensorInfo{Name: "layers.1.norm", DType: F32, Shape: []int{5}}, bytesOf(20)},
		{TensorInfo{Name: "layers.1.big", DType: F64, Shape: []int{2}}, bytesOf(16)},
	}
	dir := t.TempDir()
	if err := Write(filepath.Join(dir, "model.safetensors"), AlignedOrder(in), nil); err != nil {
		t.Fatal(err)
	}
	ck, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, want := range in {
		got, ok := ck.Tensor(want.Name)
		if !ok {
			t.Fatalf("%s missing", want.Name)
		}
		if string(got.Data) != string(want.Data) {
			t.Errorf("%s: contents differ", want.Name)
		}
		_, off, _ := ck.Locate(want.Name)
		size := int64(want.DType.Size())
		if off%size != 0 || uintptr(unsafe.Pointer(&got.Data[0]))%uintptr(size) != 0 {
			t.Errorf("%s (%s) starts at file offset %d: not a multiple of %d", want.Name, want.DType, off, size)
		}
	}
}
