package predictor

import (
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the predictor's model-sync series. A nil *Metrics records
// nothing.
type Metrics struct {
	syncs         *prometheus.CounterVec
	bundleVersion prometheus.Gauge
	bundleCreated prometheus.Gauge
	bundleLoaded  prometheus.Gauge
	epochChanges  prometheus.Counter
	reg           prometheus.Registerer
}

// NewMetrics registers the predictor's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_predictor_bundle_syncs_total",
			Help: "Bundle sync attempts by result: ok, not_modified, no_bundle, unreachable, http_error, busy (429 or 503: a long poll past the trainer's bounds), refused (checksum, signature or schema check failed), stale (an older version of the lineage in service, kept out), older_lineage (a bundle of a lineage begun before the bundle in service was made: a replay, kept out), future (a bundle claiming a time beyond the clock skew allowed, kept out).",
		}, []string{"result"}),
		bundleVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_predictor_bundle_version",
			Help: "Version of the bundle in service (0 before the first).",
		}),
		bundleCreated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_predictor_bundle_created_timestamp_seconds",
			Help: "Unix time the bundle in service was created by the trainer; its age is time() - this.",
		}),
		bundleLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_predictor_bundle_loaded_timestamp_seconds",
			Help: "Unix time the bundle in service was loaded.",
		}),
		epochChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "headroom_predictor_bundle_epoch_changes_total",
			Help: "Bundles put in service from a new lineage (another epoch): the trainer's bundles were wiped, or another trainer answers.",
		}),
	}
	reg.MustRegister(m.syncs, m.bundleVersion, m.bundleCreated, m.bundleLoaded, m.epochChanges)
	return m
}

func (m *Metrics) syncResult(result string) {
	if m != nil {
		m.syncs.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) epochChanged() {
	if m != nil {
		m.epochChanges.Inc()
	}
}

func (m *Metrics) observeBundle(p *bundle.Published) {
	if m == nil || p == nil {
		return
	}
	m.bundleVersion.Set(float64(p.Bundle.Version))
	m.bundleCreated.Set(float64(p.Bundle.CreatedAt.UnixNano()) / 1e9)
	m.bundleLoaded.SetToCurrentTime()
}

// ObserveBundle records a bundle put in service by other means than a sync
// (a local file at start, or a trainer in the same process).
func (m *Metrics) ObserveBundle(p *bundle.Published) { m.observeBundle(p) }

// WatchAge exports the age of p's bundle in service, computed at scrape time,
// so a stalled trainer shows as a growing number.
func (m *Metrics) WatchAge(p *Predictor) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headroom_predictor_bundle_age_seconds",
		Help: "Seconds since the bundle in service was created by the trainer (0 before the first).",
	}, func() float64 {
		if pub, _ := p.Current(); pub != nil {
			return time.Since(pub.Bundle.CreatedAt).Seconds()
		}
		return 0
	}))
}
