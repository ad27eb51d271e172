package server

// Streaming mode: a model whose weights do not fit the memory the KV policy finds loads
// with its experts (a mixture-of-experts model) or its decoder layers (a dense model)
// read from the checkpoint through a RAM cache (runner/residency) instead of failing or
// thrashing the page cache.

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/residency"
)

// planStreaming plans m in streaming mode: with the user's budget (l.WeightBudget), or
// else with every byte the memory allows (streamBudget). ok is false when the model has
// nothing to stream.
func (l *EngineLoader) planStreaming(m *registry.LocalModel, numCtx int, freed int64) (p *LoadPlan, ok bool, err error) {
	experts, dense, err := residency.StreamedBytes(m.Dir)
	if err != nil || experts == 0 {
		return nil, false, err
	}
	what := "experts"
	if dense {
		what = "layers"
	}
	pinned := m.Size - experts
	budget := l.WeightBudget
	if budget <= 0 && l.KV == nil {
		return nil, false, nil
	}
	info, err := registry.ReadInfo(m.Dir)
	if err != nil {
		return nil, true, err
	}
	p = &LoadPlan{Model: m, Experts: experts, Weights: m.Size, Dense: dense}
	if l.KV == nil {
		p.WeightBudget = min(budget, m.Size)
		p.Context = numCtx
		if info.ContextLength > 0 {
			p.Context = min(numCtx, info.ContextLength)
		}
		p.Context = min(p.Context, maxUnknownContext)
		p.ContextReason = fixedContextReason(p.Context, info.ContextLength)
		p.Size = p.WeightBudget + fp16KV(info, p.Context)
		p.Peak, p.KVSpec = p.Size, "fp16"
		return p, true, nil
	}
	// The KV plan with nothing of the experts resident, with a streamed load's overhead
	// and reserve, settles the layout and the context; the streamed weights take what is
	// left beside it.
	rows := streamRowBytes(info)
	kv, err := l.kvPlanWith(m, numCtx, freed, func(s *kvstore.ModelShape) {
		s.WeightBytes = min(s.WeightBytes, pinned)
		s.Streamed, s.Overhead = true, streamFixed(info)
	})
	if err != nil {
		return nil, true, err
	}
	// The prompt's passes take rows at a time, their activations planned beside the cache.
	spare := kv.plan.Free - kv.plan.KVBytes
	p.MaxBatch = streamBatchFor(rows, spare)
	act := int64(p.MaxBatch) * rows
	kv.plan.Overhead += act
	kv.plan.Free -= act
	if budget <= 0 {
		if budget = residency.Budget(pinned, experts, spare-act); budget <= 0 {
			return nil, true, fmt.Errorf("%s: its %s of weights that stay in memory, the KV cache (%s), a pass's activations (%s) and the reserve (%s) leave no memory for streamed %s (%s available)",
				m.Dir, gb(pinned), gb(kv.plan.KVBytes), gb(kv.plan.Overhead), gb(kv.plan.Reserve), what, gb(int64(kv.plan.Memory.Available)))
		}
	}
	budget = min(budget, m.Size)
	p.WeightBudget = budget
	if kv.plan.Memory.Limited && !dense && p.MaxBatch > 2*decodeRows && os.Getenv("GOMEMLIMIT") == "" {
		// Beside the expert cache under the cap's limit: the activations' room, idle while
		// decoding (limitHeap sets the heap's limit that the loan lowers meanwhile).
		p.DecodeLoan = min(int64(p.MaxBatch-decodeRows)*rows, pinned+experts-budget)
	}
	kv.withWeights(budget)
	p.Context, p.Size, p.Peak, p.KVSpec, p.kv = kv.plan.Context, kv.plan.Weights+kv.plan.KVBytes, kv.plan.Peak(), kv.plan.Layout.String(), kv
	p.ContextReason = kv.plan.ContextReason
	p.Vision = kv.vision
	return p, true, nil
}

// decodeRows is the most rows a pass may have while a streamed model's expert cache
// uses the room planned for its prompt passes' activations (LoadPlan.DecodeLoan): a
// decode step of a batch of sequences, or a speculative verification, not a prompt's
// chunk, which takes the room back.
const decodeRows = 16

// withWeights makes the plan, made with the pinned weights alone, the plan of a load with
// budget bytes of weights: they take what was free, and the prefix cache's budget shrinks.
func (kv *kvLoad) withWeights(budget int64) {
	kv.plan.Free -= budget - kv.shape.WeightBytes
	kv.plan.Weights, kv.shape.WeightBytes = budget, budget
	kv.plan.PrefixBudget = 0
	switch kv.plan.Memory.Pressure {
	case sysmem.Normal:
		kv.plan.PrefixBudget = max(kv.plan.Free-kv.plan.KVBytes, 0) / 2
	case sysmem.Warn:
		kv.plan.PrefixBudget = max(kv.plan.Free-kv.plan.KVBytes, 0) / 4
	}
}

// limitHeap gives the Go collector a soft memory limit for a model streamed under a memory
// cgroup's limit: what the limit leaves beside the weight budget and the reserve, so that the
// collector runs more often rather than let dead memory push the process over the limit,
// where the kernel would kill it. A user's GOMEMLIMIT wins; with several models the lowest
// limit stays.
func limitHeap(p *LoadPlan) {
	if p.WeightBudget <= 0 || p.kv == nil || !p.kv.plan.Memory.Limited || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := int64(p.kv.plan.Memory.Total) - p.WeightBudget - p.kv.plan.Reserve
	if limit < 64<<20 {
		return
	}
	if cur := debug.SetMemoryLimit(-1); limit < cur {
		debug.SetMemoryLimit(limit)
	}
}

// followPressure sets a streamed model's weight budget (res; nil: the model does not
// stream) for the pressure of a new sequence's plan, and keeps that plan's prefix budget
// within the load's: the reading counts the expert cache as available (cacheBytes), which
// the expert cache is planned to fill.
func followPressure(res *residency.Manager, p *LoadPlan, plan *kvstore.Plan) {
	if res == nil {
		return
	}
	res.SetBudget(budgetUnderPressure(p.WeightBudget, res.Stats().Pinned, plan.Memory.Pressure))
	if plan.Memory.Pressure >= sysmem.Warn {
		// Under pressure the room lent while decoding goes back too, until the next
		// prompt pass ends (model.SetDecodeLoan).
		res.Lend(0)
	}
	if p.kv != nil {
		plan.PrefixBudget = min(plan.PrefixBudget, p.kv.plan.PrefixBudget)
	}
}

// cacheBytes is the memory of a streamed model's expert cache (its units in memory): what
// it gives back under pressure.
func (m *engineModel) cacheBytes() int64 {
	if res := m.residency(); res != nil {
		return res.Stats().Resident
	}
	return 0
}

// budgetUnderPressure is the expert cache's budget for the pressure of a request's plan: the
// load's under normal pressure, half of its expert cache under warn, a quarter under
// critical (the pinned weights stay). It grows back when the pressure falls.
func budgetUnderPressure(load int64, pinned int64, pressure sysmem.Pressure) int64 {
	cache := load - pinned
	switch {
	case pressure >= sysmem.Critical:
		cache /= 4
	case pressure >= sysmem.Warn:
		cache /= 2
	}
	return pinned + max(cache, 0)
}

func gb(n int64) string { return fmt.Sprintf("%.2f GB", float64(n)/1e9) }

// streamPerf is the PERF keys of a request's weight streaming: the expert cache's hits
// and misses (a dense model's: layer_hits and layer_misses), the MB read per generated
// token (the prompt's reads included), and how many of the units read ahead were used.
func streamPerf(before, after residency.Stats, genTokens int, dense bool) []any {
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	read := after.BytesRead - before.BytesRead
	issued, useful := after.PrefetchIssued-before.PrefetchIssued, after.PrefetchUseful-before.PrefetchUseful
	pred, right := after.Predicted-before.Predicted, after.PredictedRight-before.PredictedRight
	perTok := float64(read) / 1e6 / float64(max(genTokens, 1))
	unit := "expert"
	if dense {
		unit = "layer"
	}
	out := []any{unit + "_hits", hits, unit + "_misses", misses, "read_mb_tok", fmt.Sprintf("%.1f", perTok),
		"resident_gb", fmt.Sprintf("%.2f", float64(after.Pinned+after.Resident)/1e9)}
	if issued > 0 {
		out = append(out, "prefetch_useful", fmt.Sprintf("%d/%d", useful, issued))
	}
	if pred > 0 {
		out = append(out, "route_guess_acc", fmt.Sprintf("%.2f", float64(right)/float64(pred)))
	}
	return out
}
