package kvstore

import (
	"runtime"
	"unsafe"
)

// StoredBlock is a run of consecutive positions of a layer's storage as it lies in
// memory, for a backend that reads the cache in place instead of keeping a copy of its
// own (package metal hands these slices to MLX): a block of a full-attention layer, or
// one of the (at most two) runs of a sliding window's ring. The buffer holds Slots
// positions, position-major then head (row s·kvHeads+h is head h in slot s); the run
// is slots Slot..Slot+Positions-1, holding positions First..First+Positions-1.
//
// The slices alias the layer's storage: they are valid until the layer's next Append,
// Truncate or conversion, and must not be written.
type StoredBlock struct {
	First, Positions int // the absolute positions held
	Slot, Slots      int // where they start in the buffer, and the buffer's size in positions
	K, V             BlockData
}

// BlockData is the storage of one block's keys or values.
type BlockData struct {
	Format Format
	F32    []float32 // a float32 cache (Full with fp32): Positions×kvHeads×dim
	// Codes holds a row's packed codes (Affine, Q4_0; internal/quant's layout,
	// quant.Words(dim, bits) words a row); Halfs its fp16 values: the elements
	// (F16), scale and bias interleaved per group (Affine) or a scale per group (Q4_0).
	Codes []uint32
	Halfs []uint16
}

// BlockSource is implemented by the layer kinds whose storage can be read in place: a
// backend that reads the blocks itself (metal) also needs the format the next positions
// will be stored in, to round a step's keys and values the way the layer will.
type BlockSource interface {
	Layer
	// Blocks are the stored positions, in order, as they lie in memory.
	Blocks() []StoredBlock
	// Spec is the storage the layer uses now: fp16 for Full (also a float32 Full,
	// whose blocks carry F32), and for a quantized kind before quantized_kv_start.
	Spec() Spec
	// Converts reports whether the layer still stores fp16 and will switch to its
	// quantized spec at quantized_kv_start: its stored blocks then change format.
	Converts() bool
}

var (
	_ BlockSource = (*Full)(nil)
	_ BlockSource = (*Quantized)(nil)
	_ BlockSource = (*Rotating)(nil)
)

// Blocks implements BlockSource.
func (c *Full) Blocks() []StoredBlock {
	out := make([]StoredBlock, 0, c.blocks())
	for i := 0; i < c.blocks(); i++ {
		b := StoredBlock{First: i * BlockTokens, Positions: min(BlockTokens, c.n-i*BlockTokens), Slots: BlockTokens,
			K: BlockData{Format: FormatF16}, V: BlockData{Format: FormatF16}}
		if c.fp32 {
			b.K.F32, b.V.F32 = c.k32[i], c.v32[i]
		} else {
			b.K.Halfs, b.V.Halfs = c.k16[i], c.v16[i]
		}
		out = append(out, b)
	}
	return out
}

// Spec implements BlockSource: a Full cache's blocks are fp16, or float32 in F32 with
// the fp16 format named.
func (c *Full) Spec() Spec { return SpecF16 }

// Converts implements BlockSource: a Full cache never changes format.
func (c *Full) Converts() bool { return false }

// FP32 reports whether the cache keeps float32 (an exact reference) rather than fp16.
func (c *Full) FP32() bool { return c.fp32 }

// Blocks implements BlockSource.
func (c *Quantized) Blocks() []StoredBlock {
	out := make([]StoredBlock, 0, len(c.kb))
	for i := range c.kb {
		out = append(out, StoredBlock{
			First: i * BlockTokens, Positions: min(BlockTokens, c.n-i*BlockTokens), Slots: BlockTokens,
			K: BlockData{Format: c.kc.f, Codes: c.kb[i].codes, Halfs: c.kb[i].halfs},
			V: BlockData{Format: c.vc.f, Codes: c.vb[i].codes, Halfs: c.vb[i].halfs},
		})
	}
	return out
}

// Blocks implements BlockSource: the positions the ring holds, lo..n-1, as the runs
// of slots they occupy (two where they wrap around the ring's end).
func (c *Rotating) Blocks() []StoredBlock {
	var out []StoredBlock
	for p := c.lo; p < c.n; {
		slot := p % c.slots
		run := min(c.n-p, c.slots-slot)
		out = append(out, StoredBlock{First: p, Positions: run, Slot: slot, Slots: c.slots,
			K: BlockData{Format: c.kc.f, Codes: c.k.codes, Halfs: c.k.halfs},
			V: BlockData{Format: c.vc.f, Codes: c.v.codes, Halfs: c.v.halfs}})
		p += run
	}
	return out
}

// PageSize is the alignment of block storage on macOS: Metal wraps memory without
// copying only when it starts on a page and spans whole pages (16 KiB on Apple
// Silicon), so a GPU reading the cache in place needs blocks laid out that way.
const PageSize = 16 << 10

// alignBlocks says whether block storage is page-aligned here. Only MLX on a Mac reads
// it in place; elsewhere MLX copies what it is given, and alignment would only cost
// memory.
var alignBlocks = runtime.GOOS == "darwin"

// blockSlice allocates n elements of block storage: on macOS, starting on a page and
// with a capacity of whole pages (cap() reaches the end of the last page).
func blockSlice[T uint16 | uint32 | float32](n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if !alignBlocks || n*size < PageSize {
		return make([]T, n)
	}
	pages := (n*size + PageSize - 1) / PageSize * PageSize / size
	buf := make([]T, pages+PageSize/size)
	off := 0
	if rem := int(uintptr(unsafe.Pointer(&buf[0])) % PageSize); rem != 0 {
		off = (PageSize - rem) / size
	}
	return buf[off : off+n : off+pages]
}
