package model

import (
	"fmt"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
)

// TransferModel predicts the time a prefill pod's KV cache takes to reach a
// decode pod: a bandwidth law per link class,
//
//	ms = latency + bytes / bandwidth · contention,
//
// where contention = 1 + Contention·(concurrent − 1) when the number of
// transfers on the path is known and UnknownContention when it is not. A law
// rather than trees because routing asks about prompt lengths the link has
// not carried yet: the law's cost grows with bytes wherever they are, where a
// tree would repeat its last leaf. It is immutable once built; Prepare must
// be called (Decode does) before Predict.
//
// Classes the model never saw borrow from the classes it did, because a
// farther class is never a faster link (see Predict).
type TransferModel struct {
	// DefaultBytesPerToken converts kv_transfer_tokens to bytes for samples
	// and predictions that do not say kv_bytes_per_token: the pool's setting,
	// or what the training samples reported most often.
	DefaultBytesPerToken float64 `json:"default_bytes_per_token"`
	// Classes are the fitted link classes, nearest first, each at most once.
	Classes []TransferClass `json:"classes"`
	// MinMs and MaxMs clamp every prediction, as TargetModel's do.
	MinMs float64 `json:"min_ms"`
	MaxMs float64 `json:"max_ms"`
	// Calibration is the pooled distribution of log(actual/predicted) on
	// rows the laws were not fitted on; a class with its own calibration
	// uses that instead.
	Calibration Calibration `json:"calibration"`
	// Shared is the part of the label every link class has in common,
	// fitted once over all of them: for the split-TTFT law the prefill on
	// P's row, so that the classes' laws hold only what differs between
	// links (the transfer) and are ordered by it. nil for the KV-transfer
	// law, whose label is the transfer alone, and in split-TTFT laws of
	// bundles before it (whose classes' laws hold the prefill as well).
	Shared *SharedTerms `json:"shared,omitempty"`

	// Holdout figures over every class, and coverage of the calibrated
	// quantile on the holdout.
	Holdout         Quality           `json:"holdout"`
	HoldoutCoverage *QuantileCoverage `json:"holdout_coverage,omitempty"`
	TrainSamples    int               `json:"train_samples"`
	HoldoutSamples  int               `json:"holdout_samples"`
	TrainedAt       time.Time         `json:"trained_at"`
	StoreGeneration uint64            `json:"store_generation"`
	TrainSeconds    float64           `json:"train_seconds"`

	byClass [features.NumLinkClasses]*TransferClass
}

// SharedTerms are a law's terms common to every link class: a
// non-negative cost per unit of each column of the prefill pod's row
// (features.SplitTTFTSharedColumns when the trainer fits them), built by
// the one feature builder (features.Schema) in training and prediction.
// The class laws' latencies hold the intercept.
type SharedTerms struct {
	Columns []string `json:"columns"`
	// MsPer is the cost in ms of one unit of each column, ≥ 0: every
	// column is one latency cannot fall as it grows.
	MsPer  []float64 `json:"ms_per"`
	schema features.Schema
}

// maxSharedMsPer bounds a shared coefficient: a millisecond per token or
// request is already slower than any prefill; a bound keeps a crafted
// bundle from making the sum overflow.
const maxSharedMsPer = 1e6

func (s *SharedTerms) prepare() error {
	if len(s.Columns) == 0 || len(s.Columns) != len(s.MsPer) {
		return fmt.Errorf("shared terms: %d columns, %d coefficients, want as many of each and at least one", len(s.Columns), len(s.MsPer))
	}
	schema, err := features.NewSchema(s.Columns)
	if err != nil {
		return fmt.Errorf("shared terms: %w", err)
	}
	for i, v := range s.MsPer {
		if !finite(v) || v < 0 || v > maxSharedMsPer {
			return fmt.Errorf("shared terms: %s costs %v ms, want a number in [0, %g]", s.Columns[i], v, float64(maxSharedMsPer))
		}
		if schema.Direction(i) <= 0 {
			return fmt.Errorf("shared terms: column %s is not one latency grows with", s.Columns[i])
		}
	}
	s.schema = schema
	return nil
}

// Schema is the shared terms' columns, compiled; the model must be
// prepared.
func (s *SharedTerms) Schema() features.Schema { return s.schema }

// Ms is the shared terms' cost of columns x (Schema's, of one row).
func (s *SharedTerms) Ms(x []float64) float64 {
	y := 0.0
	for i, v := range x {
		y += s.MsPer[i] * math.Max(v, 0)
	}
	return y
}

// SharedMs is the law's shared part on row r (0 without shared terms),
// buf a scratch slice for its columns.
func (m *TransferModel) SharedMs(r *features.Row, buf []float64) float64 {
	if m.Shared == nil {
		return 0
	}
	return m.Shared.Ms(m.Shared.schema.Build(r, buf))
}

// TransferClass is the law of one link class.
type TransferClass struct {
	Class string `json:"class"` // features.LinkClass name, e.g. "same-rack"
	// LatencyMs is the fixed cost of a transfer: setup, handshakes, the
	// first block's round trip.
	LatencyMs float64 `json:"latency_ms"`
	// BytesPerSec is the bandwidth one transfer gets alone on the link.
	BytesPerSec float64 `json:"bytes_per_sec"`
	// Contention is how much each other transfer on the path stretches the
	// byte time: 1 when they share the link equally, 0 when they do not
	// interfere.
	Contention float64 `json:"contention"`
	// UnknownContention is the byte-time multiplier for a transfer whose
	// concurrency is not known: what the training samples saw on average.
	UnknownContention float64 `json:"unknown_contention"`
	// Tokens is the span of kv_transfer_tokens the law was fitted on; beyond
	// it the law extrapolates.
	Tokens Range `json:"tokens"`
	// Calibration is this class's own residual distribution; empty when it
	// had too few rows, and then the model's pooled one applies.
	Calibration Calibration `json:"calibration"`
	Holdout     Quality     `json:"holdout"`
	Samples     int         `json:"samples"`
}

// TransferStatus is the transfer model's line in both servers' /status:
// whether there is one, and, when there is, its holdout quality overall
// and per link class (the whole law is in /model/info).
type TransferStatus struct {
	Ready bool `json:"ready"`
	*TransferSummary
}

// TransferSummary is TransferStatus's part for a model that exists.
type TransferSummary struct {
	HoldoutMAPE      float64                        `json:"holdout_mape"`
	HoldoutBias      float64                        `json:"holdout_bias"`
	HoldoutRows      int                            `json:"holdout_rows"`
	HoldoutCoverage  *QuantileCoverage              `json:"holdout_coverage,omitempty"`
	TrainedOnSamples int                            `json:"trained_on_samples"`
	Classes          map[string]TransferClassStatus `json:"classes"`
}

// TransferClassStatus is one link class's line in a TransferSummary.
type TransferClassStatus struct {
	HoldoutMAPE float64 `json:"holdout_mape"`
	HoldoutBias float64 `json:"holdout_bias"`
	HoldoutRows int     `json:"holdout_rows"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	LatencyMs   float64 `json:"latency_ms"`
}

// Status is m's TransferStatus; a nil m is not ready.
func (m *TransferModel) Status() TransferStatus {
	if m == nil {
		return TransferStatus{}
	}
	sum := &TransferSummary{HoldoutMAPE: m.Holdout.MAPE, HoldoutBias: m.Holdout.Bias, HoldoutRows: m.Holdout.Rows,
		HoldoutCoverage: m.HoldoutCoverage, TrainedOnSamples: m.TrainSamples, Classes: map[string]TransferClassStatus{}}
	for _, k := range m.Classes {
		sum.Classes[k.Class] = TransferClassStatus{HoldoutMAPE: k.Holdout.MAPE, HoldoutBias: k.Holdout.Bias,
			HoldoutRows: k.Holdout.Rows, BytesPerSec: k.BytesPerSec, LatencyMs: k.LatencyMs}
	}
	return TransferStatus{Ready: true, TransferSummary: sum}
}

// Prepare checks a decoded model and indexes its classes, so that Predict
// can neither panic nor return a non-finite number. It is idempotent.
func (m *TransferModel) Prepare() error {
	if !finite(m.DefaultBytesPerToken) || m.DefaultBytesPerToken <= 0 {
		return fmt.Errorf("transfer model: default bytes per token %v, want a positive number", m.DefaultBytesPerToken)
	}
	if !finite(m.MinMs) || m.MinMs <= 0 || !finite(m.MaxMs) || m.MaxMs < m.MinMs {
		return fmt.Errorf("transfer model: bad clamps: min %v, max %v", m.MinMs, m.MaxMs)
	}
	if len(m.Classes) == 0 {
		return fmt.Errorf("transfer model: no link classes")
	}
	if err := m.Calibration.Validate(); err != nil {
		return fmt.Errorf("transfer model: %w", err)
	}
	if m.Shared != nil {
		if err := m.Shared.prepare(); err != nil {
			return fmt.Errorf("transfer model: %w", err)
		}
	}
	var byClass [features.NumLinkClasses]*TransferClass
	for i := range m.Classes {
		k := &m.Classes[i]
		c, ok := features.ParseLinkClass(k.Class)
		if !ok {
			return fmt.Errorf("transfer model: unknown link class %q", k.Class)
		}
		if byClass[c] != nil {
			return fmt.Errorf("transfer model: link class %s twice", c)
		}
		if err := k.validate(); err != nil {
			return fmt.Errorf("transfer model: %s: %w", c, err)
		}
		byClass[c] = k
	}
	m.byClass = byClass
	return nil
}

func (k *TransferClass) validate() error {
	switch {
	case !finite(k.LatencyMs) || k.LatencyMs < 0 || k.LatencyMs > 1e6:
		return fmt.Errorf("latency %v ms, want a number in [0, 1e6]", k.LatencyMs)
	case !finite(k.BytesPerSec) || k.BytesPerSec <= 0:
		return fmt.Errorf("bandwidth %v B/s, want a positive number", k.BytesPerSec)
	case !finite(k.Contention) || k.Contention < 0 || k.Contention > 100:
		return fmt.Errorf("contention %v, want a number in [0, 100]", k.Contention)
	case !finite(k.UnknownContention) || k.UnknownContention < 1 || k.UnknownContention > 1e4:
		return fmt.Errorf("unknown-contention factor %v, want a number in [1, 1e4]", k.UnknownContention)
	}
	return k.Calibration.Validate()
}

// Seen reports whether the model has a law of its own for class c.
func (m *TransferModel) Seen(c features.LinkClass) bool {
	return c >= 0 && c < features.NumLinkClasses && m.byClass[c] != nil
}

// Class returns the law of class c, or nil when the model never saw it.
func (m *TransferModel) Class(c features.LinkClass) *TransferClass {
	if !m.Seen(c) {
		return nil
	}
	return m.byClass[c]
}

// Predict returns the central transfer time in milliseconds of
// tokens·bytesPerToken bytes over class c with concurrent transfers on the
// path, this one included (0 when unknown); bytesPerToken 0 means
// DefaultBytesPerToken. A law with Shared terms predicts its link's part
// alone; the label's whole is Predict plus SharedMs on the row.
//
// A farther class is never faster, so a seen class's prediction is raised to
// that of any nearer seen class that would predict more (fitting noise must
// not rank a cross-zone link above a same-rack one). A class the model never
// saw takes the prediction of the nearest farther class it did see: an upper
// bound, the cautious answer, so a router does not favour a link on a guess.
// A class with no seen class beyond it has only lower bounds and gets
// ok=false: the caller must not treat the link as known.
func (m *TransferModel) Predict(c features.LinkClass, tokens int64, bytesPerToken float64, concurrent int64) (ms float64, ok bool) {
	at, ok := m.lawFor(c)
	if !ok {
		return 0, false
	}
	if !(bytesPerToken > 0) || math.IsInf(bytesPerToken, 1) {
		bytesPerToken = m.DefaultBytesPerToken
	}
	bytes := float64(max(tokens, 0)) * bytesPerToken
	y := 0.0
	for near := features.LinkClass(0); near <= at; near++ {
		if k := m.byClass[near]; k != nil {
			y = math.Max(y, k.predict(bytes, concurrent))
		}
	}
	return m.clamp(y), true
}

// lawFor is the class whose law predicts class c: c itself when seen, else
// the nearest seen farther class.
func (m *TransferModel) lawFor(c features.LinkClass) (features.LinkClass, bool) {
	if c < 0 || c >= features.NumLinkClasses {
		return 0, false
	}
	for at := c; at < features.NumLinkClasses; at++ {
		if m.byClass[at] != nil {
			return at, true
		}
	}
	return 0, false
}

func (k *TransferClass) predict(bytes float64, concurrent int64) float64 {
	factor := k.UnknownContention
	if concurrent > 0 {
		factor = 1 + k.Contention*float64(concurrent-1)
	}
	return k.LatencyMs + 1000*bytes/k.BytesPerSec*factor
}

// Quantile scales a central prediction for class c to quantile q of the
// calibrated error distribution: the class's own (or, for an unseen class,
// that of the class whose law it borrowed) when it has one, else the
// model's pooled one.
func (m *TransferModel) Quantile(c features.LinkClass, central, q float64) float64 {
	cal := m.Calibration
	if at, ok := m.lawFor(c); ok && len(m.byClass[at].Calibration.LogResiduals) > 0 {
		cal = m.byClass[at].Calibration
	}
	return m.clamp(central * math.Exp(cal.LogResidual(q)))
}

func (m *TransferModel) clamp(y float64) float64 {
	if math.IsNaN(y) {
		return m.MinMs
	}
	return math.Min(math.Max(y, m.MinMs), m.MaxMs)
}
