package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlxg/mlxg/kvstore"
)

// The prefix cache's Prometheus metrics, read from its counters at each scrape.

var (
	prefixHits = prometheus.NewDesc("mlxg_prefix_cache_hits_total",
		"Prefix blocks reused, by the tier they came from.", []string{"tier"}, nil)
	prefixLookups = prometheus.NewDesc("mlxg_prefix_cache_lookups_total",
		"Requests that looked up their prompt in the prefix cache.", nil, nil)
	prefixMisses = prometheus.NewDesc("mlxg_prefix_cache_misses_total",
		"Lookups that reused nothing.", nil, nil)
	prefixBlocks = prometheus.NewDesc("mlxg_prefix_cache_blocks",
		"Prefix blocks held, by tier.", []string{"tier"}, nil)
	prefixBytes = prometheus.NewDesc("mlxg_prefix_cache_bytes",
		"Bytes the prefix blocks take, by tier.", []string{"tier"}, nil)
	prefixEvictions = prometheus.NewDesc("mlxg_prefix_cache_evictions_total",
		"Prefix blocks evicted least-recently-used, by tier.", []string{"tier"}, nil)
	prefixSSDRead = prometheus.NewDesc("mlxg_prefix_cache_ssd_read_bytes_total",
		"Bytes of prefix blocks read from SSD.", nil, nil)
	prefixSSDWritten = prometheus.NewDesc("mlxg_prefix_cache_ssd_written_bytes_total",
		"Bytes of prefix blocks written to SSD.", nil, nil)
	prefixWrites = prometheus.NewDesc("mlxg_prefix_cache_ssd_blocks_written_total",
		"Prefix blocks written to SSD.", nil, nil)
	prefixRejected = prometheus.NewDesc("mlxg_prefix_cache_ssd_rejected_total",
		"SSD block files that failed verification and were deleted.", nil, nil)
	prefixFull = prometheus.NewDesc("mlxg_prefix_cache_ssd_full",
		"1 once the SSD tier's disk filled up and writing stopped.", nil, nil)
)

type prefixCollector struct{ p *kvstore.PrefixCache }

// NewPrefixCollector exports a prefix cache's counters as Prometheus metrics.
func NewPrefixCollector(p *kvstore.PrefixCache) prometheus.Collector { return prefixCollector{p} }

func (c prefixCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{prefixHits, prefixLookups, prefixMisses, prefixBlocks, prefixBytes,
		prefixEvictions, prefixSSDRead, prefixSSDWritten, prefixWrites, prefixRejected, prefixFull} {
		ch <- d
	}
}

func (c prefixCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.p.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(prefixHits, st.RAMHits, "ram")
	counter(prefixHits, st.DiskHits, "ssd")
	counter(prefixLookups, st.Lookups)
	counter(prefixMisses, st.Misses)
	gauge(prefixBlocks, st.RAMBlocks, "ram")
	gauge(prefixBlocks, st.DiskBlocks, "ssd")
	gauge(prefixBytes, st.RAMBytes, "ram")
	gauge(prefixBytes, st.DiskBytes, "ssd")
	counter(prefixEvictions, st.RAMEvictions, "ram")
	counter(prefixEvictions, st.DiskEvictions, "ssd")
	counter(prefixSSDRead, st.DiskRead)
	counter(prefixSSDWritten, st.DiskWritten)
	counter(prefixWrites, st.BlocksWritten)
	counter(prefixRejected, st.DiskRejected)
	full := int64(0)
	if st.DiskFull {
		full = 1
	}
	gauge(prefixFull, full)
}

// handlePrefixClear empties the prefix cache's RAM tier (DELETE /api/prefix-cache, used by
// `mlxg cache clear`); blocks that running requests hold stay until they finish.
func (s *Server) handlePrefixClear(c *gin.Context) {
	l, ok := s.cfg.Loader.(*EngineLoader)
	if !ok || l.Prefix == nil {
		c.JSON(http.StatusOK, gin.H{"cleared": 0})
		return
	}
	c.JSON(http.StatusOK, gin.H{"cleared": l.Prefix.ClearRAM()})
}
