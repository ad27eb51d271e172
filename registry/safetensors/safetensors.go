// Package safetensors reads and writes the safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the raw little-endian data.
//
// Files are memory-mapped read-only, so a tensor's Data aliases the page cache and loading
// a checkpoint copies nothing. Every header is validated before use (length bounds, known
// dtypes, shape × dtype size equal to the byte range, ranges inside the file and not
// overlapping); a bad file is an error naming the file and the tensor, never a panic.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/mlxg/mlxg/internal/half"
)

// DType is a safetensors element type, spelled as in the header ("F16", "BF16", "U32", ...).
type DType string

// The dtypes this package knows.
const (
	F64    DType = "F64"
	F32    DType = "F32"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I64    DType = "I64"
	I32    DType = "I32"
	I16    DType = "I16"
	I8     DType = "I8"
	U64    DType = "U64"
	U32    DType = "U32"
	U16    DType = "U16"
	U8     DType = "U8"
	Bool   DType = "BOOL"
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
)

var dtypeSizes = map[DType]int{
	F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1,
	U64: 8, U32: 4, U16: 2, U8: 1, Bool: 1, F8E4M3: 1, F8E5M2: 1,
}

// Size is the number of bytes per element, 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// maxHeaderLen bounds the JSON header, as the reference implementation does (100 MB).
const maxHeaderLen = 100 << 20

// TensorInfo describes one tensor; Begin and End are offsets within the data section.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	Begin int64
	End   int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a file's parsed and validated header.
type Header struct {
	Metadata   map[string]string
	Tensors    []TensorInfo // sorted by Begin
	DataOffset int64        // where the data section starts in the file
}

// ReadHeader reads and validates only the header of path (no mmap), e.g. to count parameters.
func ReadHeader(path string) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return readHeader(path, f, st.Size())
}

func readHeader(path string, r io.ReaderAt, size int64) (*Header, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, too short for a header", path, size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length: %w", path, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n < 2 || n > maxHeaderLen || int64(n) > size-8 {
		return nil, fmt.Errorf("safetensors %s: header length %d is out of bounds (file is %d bytes); the file is truncated or not safetensors", path, n, size)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 8); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header: %w", path, err)
	}
	return parseHeader(path, buf, size-8-int64(n))
}

type rawTensor struct {
	DType       DType   `json:"dtype"`
	Shape       []int   `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func parseHeader(path string, buf []byte, dataLen int64) (*Header, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(buf, &raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: header is not a JSON object: %w", path, err)
	}
	h := &Header{DataOffset: 8 + int64(len(buf))}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors %s: __metadata__ must map strings to strings: %w", path, err)
			}
			continue
		}
		var rt rawTensor
		if err := json.Unmarshal(msg, &rt); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", path, name, err)
		}
		size := rt.DType.Size()
		if size == 0 {
			return nil, fmt.Errorf("safetensors %s: tensor %q has unknown dtype %q", path, name, rt.DType)
		}
		if len(rt.DataOffsets) != 2 {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data_offsets must be [begin, end], got %v", path, name, rt.DataOffsets)
		}
		n := int64(1)
		for _, d := range rt.Shape {
			if d < 0 || (d > 0 && n > math.MaxInt64/int64(d)/int64(size)) {
				return nil, fmt.Errorf("safetensors %s: tensor %q has invalid shape %v", path, name, rt.Shape)
			}
			n *= int64(d)
		}
		t := TensorInfo{Name: name, DType: rt.DType, Shape: rt.Shape, Begin: rt.DataOffsets[0], End: rt.DataOffsets[1]}
		if t.Shape == nil {
			t.Shape = []int{}
		}
		if t.Begin < 0 || t.End < t.Begin || t.End > dataLen {
			return nil, fmt.Errorf("safetensors %s: tensor %q byte range [%d, %d) is outside the %d-byte data section; the file is truncated or corrupt", path, name, t.Begin, t.End, dataLen)
		}
		if t.End-t.Begin != n*int64(size) {
			return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v × %d bytes (%s) = %d bytes, but its byte range holds %d", path, name, rt.Shape, size, rt.DType, n*int64(size), t.End-t.Begin)
		}
		h.Tensors = append(h.Tensors, t)
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.Name < b.Name
	})
	// Sorted by Begin, a tensor overlaps an earlier one exactly when it starts before the
	// furthest end seen so far (empty tensors occupy no bytes and overlap nothing).
	var furthest *TensorInfo
	for i := range h.Tensors {
		cur := &h.Tensors[i]
		if cur.End == cur.Begin {
			continue
		}
		if furthest != nil && cur.Begin < furthest.End {
			return nil, fmt.Errorf("safetensors %s: tensors %q and %q overlap", path, furthest.Name, cur.Name)
		}
		if furthest == nil || cur.End > furthest.End {
			furthest = cur
		}
	}
	return h, nil
}

// Tensor is a tensor's description and its bytes.
type Tensor struct {
	TensorInfo
	// Data is little-endian element data. For an opened file it aliases the read-only
	// mapping: writing to it crashes the process.
	Data []byte
}

// Float32s converts F32, F16, BF16 or F64 data into a new []float32.
func (t *Tensor) Float32s() ([]float32, error) {
	n := int(t.NumElements())
	out := make([]float32, n)
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
		}
	case F16:
		half.DecodeF16(out, t.Data)
	case BF16:
		half.DecodeBF16(out, t.Data)
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:])))
		}
	default:
		return nil, fmt.Errorf("tensor %q has dtype %s, not a float type", t.Name, t.DType)
	}
	return out, nil
}

// File is an open, memory-mapped safetensors file.
type File struct {
	Path    string
	Header  *Header
	data    []byte // the whole file
	unmap   func() error
	tensors map[string]*Tensor
}

// Open maps path read-only and validates its header.
func Open(path string) (*File, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	h, err := readHeader(path, bytesReaderAt(data), int64(len(data)))
	if err != nil {
		unmap()
		return nil, err
	}
	f := &File{Path: path, Header: h, data: data, unmap: unmap, tensors: make(map[string]*Tensor, len(h.Tensors))}
	for _, ti := range h.Tensors {
		b := data[h.DataOffset+ti.Begin : h.DataOffset+ti.End : h.DataOffset+ti.End]
		f.tensors[ti.Name] = &Tensor{TensorInfo: ti, Data: b}
	}
	return f, nil
}

// Tensor returns the named tensor.
func (f *File) Tensor(name string) (*Tensor, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Close unmaps the file; tensors obtained from it must not be used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.data, f.tensors = nil, nil, nil
	return err
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

var errEmpty = errors.New("empty file")
