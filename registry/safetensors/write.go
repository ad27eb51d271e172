package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Write stores tensors (in the given order) and metadata at path atomically: it writes a
// temporary file beside path, fsyncs it, renames it over path and fsyncs the directory,
// so a crash leaves either the old file or the complete new one. Writers of weights that
// are read in place pass their tensors through AlignedOrder first.
func Write(path string, tensors []Tensor, metadata map[string]string) error {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	field := func(name string, v any) error {
		k, err := json.Marshal(name)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if !first {
			hdr.WriteByte(',')
		}
		first = false
		hdr.Write(k)
		hdr.WriteByte(':')
		hdr.Write(b)
		return nil
	}
	if len(metadata) > 0 {
		if err := field("__metadata__", metadata); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	var off int64
	for _, t := range tensors {
		if t.Name == "__metadata__" || seen[t.Name] {
			return fmt.Errorf("safetensors write %s: duplicate or reserved tensor name %q", path, t.Name)
		}
		seen[t.Name] = true
		if t.DType.Size() == 0 {
			return fmt.Errorf("safetensors write %s: tensor %q has unknown dtype %q", path, t.Name, t.DType)
		}
		if want := t.NumElements() * int64(t.DType.Size()); int64(len(t.Data)) != want {
			return fmt.Errorf("safetensors write %s: tensor %q: shape %v of %s needs %d bytes, got %d", path, t.Name, t.Shape, t.DType, want, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		end := off + int64(len(t.Data))
		if err := field(t.Name, rawTensor{DType: t.DType, Shape: shape, DataOffsets: []int64{off, end}}); err != nil {
			return err
		}
		off = end
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 { // align the data section, as the reference writer does
		hdr.WriteByte(' ')
	}

	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	w.Write(lenBuf[:])
	w.Write(hdr.Bytes())
	for _, t := range tensors {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	// CreateTemp makes the file owner-only; a checkpoint or block is an ordinary file.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("safetensors write %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("safetensors write %s: %w", path, err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		d.Sync() // make the rename durable; not every filesystem supports it
		d.Close()
	}
	return nil
}

// AlignedOrder returns tensors in an order in which Write puts every tensor at a multiple
// of its element size, so a reader can use the mapped bytes in place: the given order,
// except that a tensor whose size is not a multiple of 8 bytes goes after those that are,
// stably sorted by the largest power of two (up to 8) that divides each size, largest
// first. (The data section starts at a multiple of 8, and the tensors before any tensor
// have sizes that are multiples of its class, which its element size divides.) A single
// misaligned tensor, such as Gemma 4's one-element bfloat16 layer_scalar, would otherwise
// shift every tensor after it; MLX's Metal backend then copies each such tensor (it wraps
// only page-aligned memory without a copy), and so does the CPU backend on platforms that
// cannot read misaligned weights in place (every one but amd64 and arm64).
func AlignedOrder(tensors []Tensor) []Tensor {
	class := func(t Tensor) int {
		n := len(t.Data)
		switch {
		case n%8 == 0:
			return 8
		case n%4 == 0:
			return 4
		case n%2 == 0:
			return 2
		}
		return 1
	}
	sorted := true
	for i := 1; i < len(tensors); i++ {
		if class(tensors[i]) > class(tensors[i-1]) {
			sorted = false
			break
		}
	}
	if sorted {
		return tensors
	}
	out := slices.Clone(tensors)
	slices.SortStableFunc(out, func(a, b Tensor) int { return class(b) - class(a) })
	return out
}
