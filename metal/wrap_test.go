package metal_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
)

// writeSafetensors writes a file whose tensors lie at the given byte offsets of the
// data section (size bytes long, zero where not written), each with its values.
func writeSafetensors(t *testing.T, path string, size int64, tensors map[string]placed) {
	t.Helper()
	hdr := map[string]any{}
	for name, p := range tensors {
		hdr[name] = map[string]any{"dtype": p.dtype, "shape": p.shape, "data_offsets": []int64{p.offset, p.offset + p.bytes}}
	}
	js, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(js)))
	if _, err := f.Write(append(n[:], js...)); err != nil {
		t.Fatal(err)
	}
	base := int64(8 + len(js))
	if err := f.Truncate(base + size); err != nil { // sparse: unwritten pages cost nothing
		t.Fatal(err)
	}
	for _, p := range tensors {
		for _, w := range p.writes {
			if _, err := f.WriteAt(w.data, base+p.offset+w.at); err != nil {
				t.Fatal(err)
			}
		}
	}
}

type placed struct {
	dtype         string
	shape         []int
	offset, bytes int64
	writes        []write
}

type write struct {
	at   int64
	data []byte
}

func bf16Row(vals []float32) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], half.F32ToBF16(v))
	}
	return b
}

func embedRow(t *testing.T, path, name string, row int32) []float32 {
	got, _ := embedRowCopied(t, path, name, row)
	return got
}

// embedRowCopied is embedRow, also returning the backend's CopiedWeightBytes and device.
func embedRowCopied(t *testing.T, path, name string, row int32) ([]float32, copiedOn) {
	t.Helper()
	ckpt, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	b := mlxtest.Backend(t)
	w, err := b.Weight(ckpt, name, compute.Quant{})
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	defer c.Close()
	got, err := c.Float32s(c.Embed(w, []int32{row}))
	if err != nil {
		t.Fatal(err)
	}
	return got, copiedOn{b.CopiedWeightBytes(), b.Device()}
}

type copiedOn struct {
	bytes  int64
	device string
}

// A bf16 embedding of more than 2 GiB (as Gemma-3-27B's is) binds and reads back its
// last row: its pages used to be wrapped as a byte array whose length overflowed MLX's
// int32 dimension.
func TestTensorOver2GiB(t *testing.T) {
	if testing.Short() {
		t.Skip("maps a 2 GiB sparse file")
	}
	const rows, cols = 1<<20 + 8, 1024 // 2 GiB + 16 KiB of bf16
	bytes := int64(rows) * cols * 2
	last := make([]float32, cols)
	for i := range last {
		last[i] = float32(i%17) - 8
	}
	path := filepath.Join(t.TempDir(), "big.safetensors")
	writeSafetensors(t, path, bytes, map[string]placed{"big.weight": {dtype: "BF16", shape: []int{rows, cols}, bytes: bytes,
		writes: []write{{at: bytes - 2*cols, data: bf16Row(last)}}}})
	got := embedRow(t, path, "big", rows-1)
	for i, v := range got {
		if v != last[i] {
			t.Fatalf("column %d of the last row: %v, want %v", i, v, last[i])
		}
	}
}

// A float tensor at an offset that is not a multiple of its element size (after an odd
// byte tensor) reads back exactly, and counts in CopiedWeightBytes where MLX copies it
// beside its pages (Metal).
func TestMisalignedTensor(t *testing.T) {
	const rows, cols = 64, 512 // 64 KiB of float32: large enough to be wrapped
	vals := make([]float32, rows*cols)
	data := make([]byte, 4*len(vals))
	for i := range vals {
		vals[i] = float32(math.Sin(float64(i)))
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(vals[i]))
	}
	path := filepath.Join(t.TempDir(), "odd.safetensors")
	writeSafetensors(t, path, 3+int64(len(data)), map[string]placed{
		"pad":          {dtype: "U8", shape: []int{3}, bytes: 3, writes: []write{{data: []byte{1, 2, 3}}}},
		"table.weight": {dtype: "F32", shape: []int{rows, cols}, offset: 3, bytes: int64(len(data)), writes: []write{{data: data}}},
	})
	for _, row := range []int32{0, 37, rows - 1} {
		got, copied := embedRowCopied(t, path, "table", row)
		// Metal copies it beside its pages, and says so; MLX's CPU device copies every
		// tensor and drops the pages, which is no copy to report.
		want := int64(0)
		if copied.device == "metal" {
			want = int64(len(data))
		}
		if copied.bytes != want {
			t.Errorf("on %s: CopiedWeightBytes %d, want %d", copied.device, copied.bytes, want)
		}
		for i, v := range got {
			if want := vals[int(row)*cols+i]; v != want {
				t.Fatalf("row %d column %d: %v, want %v", row, i, v, want)
			}
		}
	}
}
