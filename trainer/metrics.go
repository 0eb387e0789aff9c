package trainer

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/store"
)

// Metrics are the trainer's Prometheus series. A nil *Metrics records
// nothing, so tests and tools can run a trainer without a registry.
type Metrics struct {
	runs            *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	publishFailures prometheus.Counter
	bundleVersion   prometheus.Gauge
	bundleCreated   prometheus.Gauge
	holdoutMAPE     *prometheus.GaugeVec
	holdoutRows     *prometheus.GaugeVec
	xgboost         prometheus.Gauge
	reg             prometheus.Registerer

	coverage      *prometheus.GaugeVec
	level         *prometheus.GaugeVec
	liveMAPE      *prometheus.GaugeVec
	liveBias      *prometheus.GaugeVec
	liveSamples   *prometheus.CounterVec
	earlyRetrains *prometheus.CounterVec
	shift         *prometheus.GaugeVec

	gateRejections *prometheus.CounterVec

	transferClassMAPE      *prometheus.GaugeVec
	transferClassBandwidth *prometheus.GaugeVec

	candidateMAPE *prometheus.GaugeVec
	choices       *prometheus.CounterVec
}

// NewMetrics registers the trainer's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reg: reg,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_training_runs_total",
			Help: "Training runs per target and result (ok, failed).",
		}, []string{"target", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "headroom_training_duration_seconds",
			Help:    "Wall time of one target's training run.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, []string{"target"}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "headroom_bundle_publish_failures_total",
			Help: "Bundles that could not be written; the previous bundle stays in service.",
		}),
		bundleVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_bundle_version",
			Help: "Version of the newest published bundle (0 before the first).",
		}),
		bundleCreated: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_bundle_created_timestamp_seconds",
			Help: "Unix time the newest bundle was created; age = time() - this.",
		}),
		holdoutMAPE: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_holdout_mape_percent",
			Help: "Mean absolute percentage error of the newest model on held-out samples.",
		}, []string{"target", "model"}),
		holdoutRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_holdout_rows",
			Help: "Held-out rows the newest model was measured on.",
		}, []string{"target"}),
		xgboost: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "headroom_xgboost_available",
			Help: "1 when the xgboost binary was found; 0 means linear models only.",
		}),
		coverage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_quantile_coverage_percent",
			Help: "Percentage of requests at or below the calibrated quantile prediction, per target: on the newest model's holdout (set=holdout) and on arriving samples over the live window (set=live). Should be near 100 x quantile.",
		}, []string{"target", "set", "quantile"}),
		level: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_quantile_served_level",
			Help: "Level of the calibrated residual distribution the next model serves the quantile at, per target, for rows inside the training ranges (range=in) and outside them (range=out): the quantile itself until live samples there show it covering less or more than it claims (adaptive conformal correction; the model in service carries its own in /model/info, calibration_adjustment and calibration_out_of_range_adjustment).",
		}, []string{"target", "quantile", "range"}),
		liveMAPE: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_live_mape_percent",
			Help: "Mean absolute percentage error on arriving samples over the live window: of the current model's own predictions (source=model) or of the predictions the router reported acting on (source=served).",
		}, []string{"target", "source"}),
		liveBias: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_live_bias_percent",
			Help: "Median signed percentage error on arriving samples over the live window; negative means predictions too low.",
		}, []string{"target", "source"}),
		liveSamples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_live_samples_total",
			Help: "Arriving samples compared with a prediction, per target and source (model, served).",
		}, []string{"target", "source"}),
		earlyRetrains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_drift_retrains_total",
			Help: "Early retrains requested because live error rose well above the holdout error.",
		}, []string{"target"}),
		shift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_live_shift",
			Help: "The trainer's judgment of each target's live error, 1 for the judgment it holds: none (not well above the holdout error), burst (well above, but briefly or narrowly: not followed) or drift (persistently, across minutes, uploads and places: followed by an early retrain, the gate measuring on the holdout rows since).",
		}, []string{"target", "judgment"}),
		gateRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_publication_rejections_total",
			Help: "Candidate models the publication gate refused, per target and reason (non_finite, out_of_band, worse_than_served, worse_than_constant, wider_bounds: bounds much wider than the model's in service when a burst began); the model in service stays. Counted also when --publish-force published them anyway.",
		}, []string{"target", "reason"}),
		transferClassMAPE: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_kv_transfer_holdout_mape_percent",
			Help: "Mean absolute percentage error of the newest KV-transfer model on held-out transfers, per link class it fitted (same-node, same-rack, same-zone, cross-zone, cross-region); all classes together are headroom_holdout_mape_percent{target=\"kv_transfer\"}.",
		}, []string{"class"}),
		transferClassBandwidth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_kv_transfer_bandwidth_bytes_per_second",
			Help: "Bandwidth one KV transfer gets alone on a link, as the newest KV-transfer model learned it, per link class it fitted.",
		}, []string{"class"}),
		candidateMAPE: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "headroom_candidate_mape_percent",
			Help: "Each candidate configuration's MAPE on the newest training rows when fitted on the older ones, at the target's latest choice (trainer self-tuning; /model/info shows the same).",
		}, []string{"target", "candidate"}),
		choices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "headroom_configuration_choices_total",
			Help: "Configuration choices made per target and chosen candidate (trainer self-tuning).",
		}, []string{"target", "chosen"}),
	}
	reg.MustRegister(m.transferClassMAPE, m.transferClassBandwidth, m.candidateMAPE, m.choices, m.gateRejections, m.runs, m.duration, m.publishFailures, m.bundleVersion, m.bundleCreated,
		m.holdoutMAPE, m.holdoutRows, m.xgboost, m.coverage, m.level, m.liveMAPE, m.liveBias, m.liveSamples, m.earlyRetrains, m.shift)
	return m
}

// watchAge exports the age of the current bundle, computed at scrape time.
func (m *Metrics) watchAge(current func() *bundle.Published) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "headroom_bundle_age_seconds",
		Help: "Seconds since the newest bundle was created (0 before the first).",
	}, func() float64 {
		if p := current(); p != nil {
			return time.Since(p.Bundle.CreatedAt).Seconds()
		}
		return 0
	}))
}

func (m *Metrics) observeRun(t features.Target, d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.runs.WithLabelValues(t.String(), result).Inc()
	m.duration.WithLabelValues(t.String()).Observe(d.Seconds())
}

func (m *Metrics) publishFailed() {
	if m != nil {
		m.publishFailures.Inc()
	}
}

// observeBundle exports the version and age of a published bundle; each
// target exports its own model's figures (observeQuality).
func (m *Metrics) observeBundle(p *bundle.Published) {
	if m == nil || p == nil {
		return
	}
	m.bundleVersion.Set(float64(p.Bundle.Version))
	m.bundleCreated.Set(float64(p.Bundle.CreatedAt.UnixNano()) / 1e9)
}

// observeTransferClasses exports a KV-transfer model's figures per link
// class; all classes together are its target's holdout series.
func (m *Metrics) observeTransferClasses(tm *model.TransferModel) {
	if m == nil {
		return
	}
	m.transferClassMAPE.Reset()
	m.transferClassBandwidth.Reset()
	for _, k := range tm.Classes {
		if k.Holdout.Rows > 0 {
			m.transferClassMAPE.WithLabelValues(k.Class).Set(k.Holdout.MAPE)
		}
		m.transferClassBandwidth.WithLabelValues(k.Class).Set(k.BytesPerSec)
	}
}

// observeQuality exports a target's newest model's holdout figures.
func (m *Metrics) observeQuality(t features.Target, f modelFacts) {
	if m == nil {
		return
	}
	m.holdoutMAPE.WithLabelValues(t.String(), "served").Set(f.holdout.MAPE)
	if f.holdoutLinear != nil {
		m.holdoutMAPE.WithLabelValues(t.String(), "linear").Set(f.holdoutLinear.MAPE)
	}
	m.holdoutRows.WithLabelValues(t.String()).Set(float64(f.holdout.Rows))
	if c := f.coverage; c != nil {
		m.coverage.WithLabelValues(t.String(), "holdout", quantileLabel(c.Quantile)).Set(c.Percent)
	}
}

func quantileLabel(q float64) string { return strconv.FormatFloat(q, 'g', -1, 64) }

func (m *Metrics) observeLive(t features.Target, source string) {
	if m != nil {
		m.liveSamples.WithLabelValues(t.String(), source).Inc()
	}
}

func (m *Metrics) observeLiveN(t features.Target, source string, n int) {
	if m != nil && n > 0 {
		m.liveSamples.WithLabelValues(t.String(), source).Add(float64(n))
	}
}

func (m *Metrics) observeLiveSummary(t features.Target, tl *targetLive, q float64) {
	if m == nil {
		return
	}
	for _, src := range [...]struct {
		name string
		r    *ring
		q    float64
	}{{"model", &tl.model, q}, {"served", &tl.served, 0}} {
		le := src.r.summary(src.q)
		if le == nil {
			continue
		}
		m.liveMAPE.WithLabelValues(t.String(), src.name).Set(le.MAPE)
		m.liveBias.WithLabelValues(t.String(), src.name).Set(le.Bias)
		if le.Coverage != nil {
			m.coverage.WithLabelValues(t.String(), "live", quantileLabel(q)).Set(*le.Coverage)
		}
	}
	if tl.level != 0 {
		m.level.WithLabelValues(t.String(), quantileLabel(q), "in").Set(tl.level)
	}
	if tl.outLevel != 0 {
		m.level.WithLabelValues(t.String(), quantileLabel(q), "out").Set(tl.outLevel)
	}
}

// observeShift sets target t's shift judgment.
func (m *Metrics) observeShift(t features.Target, judgment string) {
	if m == nil {
		return
	}
	for _, j := range [...]string{ShiftNone, ShiftBurst, ShiftDrift} {
		v := 0.0
		if j == judgment {
			v = 1
		}
		m.shift.WithLabelValues(t.String(), j).Set(v)
	}
}

func (m *Metrics) earlyRetrain(t features.Target) {
	if m != nil {
		m.earlyRetrains.WithLabelValues(t.String()).Inc()
	}
}

func (m *Metrics) observeXGBoost(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.xgboost.Set(1)
	} else {
		m.xgboost.Set(0)
	}
}

// storeCollector exports the store's sample counts at scrape time, so the
// figures are always the store's own and never a second bookkeeping.
type storeCollector struct {
	db      *store.DB
	buckets *prometheus.Desc
	totals  *prometheus.Desc
}

// NewStoreCollector exports samples stored per bucket and per side.
func NewStoreCollector(db *store.DB) prometheus.Collector {
	return &storeCollector{
		db: db,
		buckets: prometheus.NewDesc("headroom_store_bucket_samples",
			"Training samples stored per target and bucket.", []string{"target", "bucket"}, nil),
		totals: prometheus.NewDesc("headroom_store_samples",
			"Samples stored per target and side (train, holdout).", []string{"target", "side"}, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.buckets
	ch <- c.totals
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.db.Counts()
	for _, t := range features.Targets {
		for bucket, n := range c.db.BucketCounts(t) {
			ch <- prometheus.MustNewConstMetric(c.buckets, prometheus.GaugeValue, float64(n), t.String(), bucket)
		}
		ch <- prometheus.MustNewConstMetric(c.totals, prometheus.GaugeValue, float64(counts.Train(t)), t.String(), "train")
		ch <- prometheus.MustNewConstMetric(c.totals, prometheus.GaugeValue, float64(counts.Holdout(t)), t.String(), "holdout")
	}
}

func (m *Metrics) gateRejected(t features.Target, reason string) {
	if m == nil {
		return
	}
	m.gateRejections.WithLabelValues(t.String(), reason).Inc()
}

// observeSelection exports a choice's candidate errors and counts it.
func (m *Metrics) observeSelection(t features.Target, s *model.Selection) {
	if m == nil {
		return
	}
	for _, c := range s.Candidates {
		m.candidateMAPE.WithLabelValues(t.String(), c.Name).Set(c.MAPE)
	}
	m.choices.WithLabelValues(t.String(), s.Chosen).Inc()
}
