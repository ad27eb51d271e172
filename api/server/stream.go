package server

// Streaming mode: a model whose weights do not fit the memory the KV policy finds loads
// with its experts (a mixture-of-experts model) or its decoder layers (a dense model)
// read from the checkpoint through a RAM cache (runner/residency) instead of failing or
// thrashing the page cache.

import (
	"fmt"

	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/residency"
)

// planStreaming plans m in streaming mode: with the user's budget (l.WeightBudget), or
// else the largest cache of experts (or layers) that fits beside the KV plan. ok is
// false when the model has nothing to stream.
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
	autoReason := "" // the first plan's, when it sized the context from memory
	if budget <= 0 && l.KV == nil {
		return nil, false, nil
	}
	if budget <= 0 {
		// The KV plan with nothing of the experts resident says what is left for them.
		kv, err := l.kvPlan(m, numCtx, freed, pinned)
		if err != nil {
			return nil, true, err
		}
		if numCtx <= 0 {
			// Sized from memory once, before the experts take their share: planning it again
			// with the budget counted would shrink the context the budget was made beside.
			numCtx, autoReason = kv.plan.Context, kv.plan.ContextReason
		}
		if budget = residency.AutoBudget(pinned, experts, kv.plan.Free-kv.plan.KVBytes); budget <= 0 {
			return nil, true, fmt.Errorf("%s: its %s of weights that stay in memory and the KV cache leave no memory for streamed %s (%s available)",
				m.Dir, gb(pinned), what, gb(int64(kv.plan.Memory.Available)))
		}
	}
	budget = min(budget, m.Size)
	var kv *kvLoad
	if l.KV != nil {
		if kv, err = l.kvPlan(m, numCtx, freed, budget); err != nil {
			return nil, true, err
		}
	}
	p = &LoadPlan{Model: m, WeightBudget: budget, Experts: experts, Weights: m.Size, Dense: dense}
	if kv != nil {
		p.Context, p.Size, p.Peak, p.KVSpec, p.kv = kv.plan.Context, kv.plan.Weights+kv.plan.KVBytes, kv.plan.Peak(), kv.plan.Layout.String(), kv
		p.ContextReason = kv.plan.ContextReason
		if autoReason != "" {
			p.ContextReason = autoReason
		}
		return p, true, nil
	}
	info, err := registry.ReadInfo(m.Dir)
	if err != nil {
		return nil, true, err
	}
	p.Context = numCtx
	if info.ContextLength > 0 {
		p.Context = min(numCtx, info.ContextLength)
	}
	p.Context = min(p.Context, maxUnknownContext)
	p.ContextReason = fixedContextReason(p.Context, info.ContextLength)
	p.Size = budget + fp16KV(info, p.Context)
	p.Peak, p.KVSpec = p.Size, "fp16"
	return p, true, nil
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
