package cpu

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Streamed dense layers: with a compute.LayerStreamSource, the affine-quantized matrices
// of each decoder layer (attention and MLP projections, named "<prefix>.layers.<i>.…")
// are read through the residency manager, one unit per layer, never through the
// mapping. A pass's context acquires a layer's unit at the first product of that layer
// and holds it until the pass moves on to another layer, so the unit is read once per
// pass; on entering a layer it has the manager read the layers after it (the manager
// keeps a fixed set of layers and streams the rest, residency/layers.go). Products read
// the unit's buffer with the same kernels, so the logits are the mapped model's bit for
// bit.

// denseRef places a weight in its layer's unit.
type denseRef struct {
	group *layerGroup
	pos   int // the weight's place in the group (3 segments each)
	sType quant.ScaleType
}

// layerGroup is one decoder layer's streamed matrices and their unit.
type layerGroup struct {
	mgr     *residency.Manager
	prefix  string
	index   int
	members []*weight
	segs    []residency.Segment // 3 per member: packed codes, scales, biases
	unit    int                 // the manager's unit, once made (FinishStream)
	order   int                 // the layer's place in the manager's pass order

	mu    sync.Mutex
	buf   *byte     // the unit buffer the views were made of
	views []*weight // the members as views of buf
}

// layerPrefix splits a weight name into its decoder layer's prefix and index.
func layerPrefix(name string) (prefix string, index int, ok bool) {
	i := strings.LastIndex(name, ".layers.")
	if i < 0 {
		return "", 0, false
	}
	rest := name[i+len(".layers."):]
	j := strings.IndexByte(rest, '.')
	if j <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return name[:i+len(".layers.")+j], n, true
}

// bindLayer makes w, just bound from tensor t of src, a streamed layer matrix when src
// streams a dense model's layers and w is an affine-quantized matrix of a decoder layer
// whose codes, scales and biases are bound as the file stores them.
func (b *Backend) bindLayer(src compute.Source, t *safetensors.Tensor, w *weight) {
	ls, ok := src.(compute.LayerStreamSource)
	if !ok || !ls.StreamsLayers() || ls.Residency() == nil || len(t.Shape) != 2 || w.q.Mode != quant.Affine || w.stream != nil {
		return
	}
	if w.scales.Type != w.biases.Type || w.scales.Len() == 0 {
		return
	}
	prefix, index, ok := layerPrefix(w.name)
	if !ok {
		return
	}
	locate := func(name string, n int64) (residency.Segment, bool) {
		ft, ok := src.Tensor(name)
		if !ok || int64(len(ft.Data)) != n {
			return residency.Segment{}, false
		}
		p, off, ok := ls.Locate(name)
		return residency.Segment{Path: p, Off: off, Len: n}, ok
	}
	packed, ok1 := locate(w.name+".weight", int64(len(w.packed))*4)
	scales, ok2 := locate(w.name+".scales", w.scales.Bytes())
	biases, ok3 := locate(w.name+".biases", w.biases.Bytes())
	if !ok1 || !ok2 || !ok3 {
		return
	}
	st := b.streamFor(ls.Residency())
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.layers == nil {
		st.layers = map[string]*layerGroup{}
	}
	g := st.layers[prefix]
	if g == nil {
		g = &layerGroup{mgr: st.mgr, prefix: prefix, index: index, unit: -1}
		st.layers[prefix] = g
	}
	w.dense = &denseRef{group: g, pos: len(g.members), sType: w.scales.Type}
	g.members = append(g.members, w)
	g.segs = append(g.segs, packed, scales, biases)
	// The weight's bytes are read from the unit only: a product that reached the
	// mapping would fault the layer in behind the manager's back.
	w.packed, w.scales, w.biases = nil, quant.Scales{Type: w.scales.Type}, quant.Scales{Type: w.scales.Type}
}

// FinishStream implements compute.StreamFinisher: once every weight of src's model is
// bound, each decoder layer's streamed matrices become one unit of the manager, in
// the order of the layers' indices (a pass's order).
func (b *Backend) FinishStream(src compute.StreamSource) error {
	st := b.streamFor(src.Residency())
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.layers) == 0 {
		return nil
	}
	groups := make([]*layerGroup, 0, len(st.layers))
	for _, g := range st.layers {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].index != groups[j].index {
			return groups[i].index < groups[j].index
		}
		return groups[i].prefix < groups[j].prefix
	})
	segs := make([][]residency.Segment, len(groups))
	for i, g := range groups {
		segs[i] = g.segs
	}
	ids, err := st.mgr.AddLayers(segs)
	if err != nil {
		return fmt.Errorf("streaming layers: %w", err)
	}
	for i, g := range groups {
		g.unit, g.order = ids[i], i
	}
	return nil
}

// view returns member pos of g as a view of h's buffer (h is g's unit in use); the views
// are made once per read of the unit.
func (g *layerGroup) view(h residency.Handle, pos int) *weight {
	first := h.Seg(0)
	key := unsafe.SliceData(first)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.buf != key || g.views == nil {
		g.buf = key
		g.views = make([]*weight, len(g.members))
		for i, w := range g.members {
			st := w.dense.sType
			g.views[i] = &weight{name: w.name, out: w.out, in: w.in, q: w.q, bias: w.bias, transient: true,
				packed: view[uint32](h.Seg(3 * i)), scales: scalesOf(h.Seg(3*i+1), st), biases: scalesOf(h.Seg(3*i+2), st)}
		}
	}
	return g.views[pos]
}

// resolve returns the weight a product reads: w itself, or, for a streamed layer
// matrix, its view in its layer's unit, acquired for the rest of the layer (the context
// releases the previous layer's first).
func (c *context) resolve(w *weight) (*weight, error) {
	d := w.dense
	if d == nil {
		return w, nil
	}
	g := d.group
	if g.unit < 0 {
		return nil, fmt.Errorf("layer %q: its unit was never made (FinishStream not called)", w.name)
	}
	if c.layer != g {
		c.releaseLayer()
		g.mgr.EnterLayer(g.order)
		h, err := g.mgr.Acquire(g.unit)
		if err != nil {
			return nil, err
		}
		c.layer, c.layerHeld = g, h
	}
	return g.view(c.layerHeld, d.pos), nil
}

// releaseLayer ends the context's use of the layer it holds, if any.
func (c *context) releaseLayer() {
	if c.layer != nil {
		c.layerHeld.Release()
		c.layer, c.layerHeld = nil, residency.Handle{}
	}
}
