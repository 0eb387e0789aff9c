package predictor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/model"
)

// Metrics are the predictor's model-sync series. A nil *Metrics records
// nothing.
type Metrics struct {
	syncs         *prometheus.CounterVec
	bundleVersion prometheus.Gauge
	bundleCreated prometheus.Gauge
	bundleLoaded  prometheus.Gauge
}

// NewMetrics registers the predictor's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_predictor_bundle_syncs_total",
			Help: "Bundle sync attempts by result: ok, not_modified, no_bundle, unreachable, http_error, refused (checksum, signature or schema check failed).",
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
	}
	reg.MustRegister(m.syncs, m.bundleVersion, m.bundleCreated, m.bundleLoaded)
	return m
}

func (m *Metrics) syncResult(result string) {
	if m != nil {
		m.syncs.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) observeBundle(p *model.Published) {
	if m == nil || p == nil {
		return
	}
	m.bundleVersion.Set(float64(p.Bundle.Version))
	m.bundleCreated.Set(float64(p.Bundle.CreatedAt.UnixNano()) / 1e9)
	m.bundleLoaded.SetToCurrentTime()
}

// ObserveBundle records a bundle put in service by other means than a sync
// (a local file at start, or a trainer in the same process).
func (m *Metrics) ObserveBundle(p *model.Published) { m.observeBundle(p) }
