package plugins

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are one producer's series, registered with the EPP's registry
// (the handle's MetricsRecorder) and labelled by the producer's name, so
// that two producers in one EPP do not collide.
type metrics struct {
	decisions *prometheus.CounterVec
	call      prometheus.Observer
	decision  prometheus.Observer
	entries   *prometheus.CounterVec
}

// decisionBuckets are headroom_epp_decision_seconds' bucket bounds, in
// seconds: fine below a few milliseconds, where a scheduling decision's
// budget lies, so that the share of decisions above any of them (the
// 1 ms one above all) is read exactly rather than interpolated.
func decisionBuckets() []float64 {
	return []float64{0.00005, 0.0001, 0.00015, 0.0002, 0.0003, 0.0004, 0.0005, 0.00075, 0.001,
		0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1}
}

func newMetrics(reg prometheus.Registerer, name string) (*metrics, error) {
	labels := prometheus.Labels{"plugin": name}
	m := &metrics{}
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "headroom_epp_decisions_total",
		Help:        "Requests the Headroom producer ranked, by outcome: scored, or the reason the Headroom plugins scored nothing and the profiles' stock scorers decided (predictor_unavailable, deadline, no_model, extrapolated, no_option, no_candidates, peer_unranked).",
		ConstLabels: labels,
	}, []string{"outcome"})
	call := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "headroom_epp_pairs_call_seconds",
		Help:        "Wall time of the Headroom producer's ranking when it answered: the /predict/pairs call, encoding and decoding included, or the ranking in process (rankInProcess).",
		Buckets:     prometheus.ExponentialBuckets(0.0001, 2, 14),
		ConstLabels: labels,
	})
	decision := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        "headroom_epp_decision_seconds",
		Help:        "Wall time the Headroom plugins spent on one request's scheduling decision, summed over the producer's Produce (the ranking included), the scorers and the split filter, and the PreRequest hook; observed at PreRequest, so decisions the scheduler did not complete are not counted.",
		Buckets:     decisionBuckets(),
		ConstLabels: labels,
	})
	entries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "headroom_epp_training_entries_total",
		Help:        "Training entries the Headroom producer built, by result: posted (the trainer acknowledged them), dropped_unavailable (the trainer could not be reached or refused the batch), dropped_full (the buffer was full).",
		ConstLabels: labels,
	}, []string{"result"})
	for _, c := range []prometheus.Collector{decisions, call, decision, entries} {
		if err := (keepFirst{reg}).Register(c); err != nil {
			return nil, err
		}
	}
	m.decisions, m.call, m.decision, m.entries = decisions, call, decision, entries
	// Every outcome shows from the start, at zero.
	for _, r := range []string{"scored", string(ReasonUnavailable), string(ReasonDeadline), string(ReasonNoModel),
		string(ReasonExtrapolated), string(ReasonNoOption), string(ReasonNoCandidates), string(ReasonPeerUnranked)} {
		m.decisions.WithLabelValues(r)
	}
	for _, r := range []string{"posted", "dropped_unavailable", "dropped_full"} {
		m.entries.WithLabelValues(r)
	}
	return m, nil
}

// outcome counts one request's outcome.
func (m *metrics) outcome(r Reason) {
	if r == "" {
		m.decisions.WithLabelValues("scored").Inc()
		return
	}
	m.decisions.WithLabelValues(string(r)).Inc()
}

// keepFirst registers with a Registerer, keeping the series already
// registered under a name and labels (a second producer of one name in
// one EPP) rather than failing.
type keepFirst struct{ prometheus.Registerer }

func (k keepFirst) Register(c prometheus.Collector) error {
	var already prometheus.AlreadyRegisteredError
	if err := k.Registerer.Register(c); err != nil && !errors.As(err, &already) {
		return err
	}
	return nil
}

func (k keepFirst) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := k.Register(c); err != nil {
			panic(err)
		}
	}
}
