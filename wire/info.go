package wire

import (
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/internal/orderedjson"
	"github.com/headroomhq/headroom/model"
)

// ModelInfo is GET /model/info on both servers: what model is in service
// and how good it is, by curl. Every target's model is under the target's
// name, in the order of features.Targets: a per-pod target's as a
// TargetInfo, a per-pair one's (KV transfer, split TTFT) as a TransferInfo.
type ModelInfo struct {
	Version        uint64
	Epoch          string // the version's lineage; none from an older trainer
	Checksum       string
	TrainedAt      any // RFC 3339 or null
	AgeSeconds     *float64
	LoadedAt       any // a predictor's, RFC 3339; nil on the trainer
	XGBoostMissing bool
	// Models are the targets' models, in the order of features.Targets.
	Models []TargetModelInfo
	// Training is the trainer's status of its targets (trainer.Status);
	// nil on a predictor, which trains nothing.
	Training any
}

// TargetModelInfo is one target's model in a ModelInfo: Pod for a target
// predicted per pod, Transfer for one predicted per pair by a law per link
// class (the KV transfer, the split TTFT).
type TargetModelInfo struct {
	Target   features.Target
	Pod      *TargetInfo
	Transfer *TransferInfo
}

// Pod is the info of per-pod target t's model (zero when t has none).
func (i ModelInfo) Pod(t features.Target) TargetInfo {
	for _, m := range i.Models {
		if m.Target == t && m.Pod != nil {
			return *m.Pod
		}
	}
	return TargetInfo{}
}

// Transfer is the info of the KV-transfer model.
func (i ModelInfo) Transfer() TransferInfo { return i.Law(features.KVTransfer) }

// Law is the info of per-pair target t's model (zero when t has none).
func (i ModelInfo) Law(t features.Target) TransferInfo {
	for _, m := range i.Models {
		if m.Target == t && m.Transfer != nil {
			return *m.Transfer
		}
	}
	return TransferInfo{}
}

// MarshalJSON writes the bundle's fields, then each target's under its
// name, then the trainer's status when there is one.
func (i ModelInfo) MarshalJSON() ([]byte, error) {
	o := orderedjson.Object{{Key: "version", Value: i.Version}}
	if i.Epoch != "" {
		o = append(o, orderedjson.Field{Key: "epoch", Value: i.Epoch})
	}
	if i.Checksum != "" {
		o = append(o, orderedjson.Field{Key: "checksum", Value: i.Checksum})
	}
	o = append(o, orderedjson.Field{Key: "trained_at", Value: i.TrainedAt}, orderedjson.Field{Key: "age_seconds", Value: i.AgeSeconds})
	if i.LoadedAt != nil {
		o = append(o, orderedjson.Field{Key: "loaded_at", Value: i.LoadedAt})
	}
	o = append(o, orderedjson.Field{Key: "xgboost_missing", Value: i.XGBoostMissing})
	for _, m := range i.Models {
		var v any = m.Pod
		if m.Transfer != nil {
			v = m.Transfer
		}
		o = append(o, orderedjson.Field{Key: m.Target.String(), Value: v})
	}
	if i.Training != nil {
		o = append(o, orderedjson.Field{Key: "training", Value: i.Training})
	}
	return o.MarshalJSON()
}

// TransferInfo describes the KV-transfer model in a ModelInfo: its quality,
// and the law it learned per link class.
type TransferInfo struct {
	Ready bool `json:"ready"`
	// TrainSamples and HoldoutSamples are what the store holds now
	// (trainer) or held when the model was trained (predictor).
	TrainSamples     int                     `json:"train_samples"`
	HoldoutSamples   int                     `json:"holdout_samples"`
	TrainedOnSamples int                     `json:"trained_on_samples"`
	Holdout          model.Quality           `json:"holdout"`
	HoldoutCoverage  *model.QuantileCoverage `json:"holdout_coverage,omitempty"`
	Calibration      string                  `json:"calibration_source,omitempty"`
	// DefaultBytesPerToken applies to predictions and samples that do not
	// give kv_bytes_per_token; 1 means the law is in tokens.
	DefaultBytesPerToken float64               `json:"default_bytes_per_token,omitempty"`
	Classes              []model.TransferClass `json:"classes,omitempty"`
	// SharedCoefficients are the split-TTFT law's terms common to every
	// link class (model.SharedTerms), ms per unit of each column of the
	// prefill pod's row; absent for the KV-transfer law.
	SharedCoefficients map[string]float64 `json:"shared_coefficients,omitempty"`
	TrainedAt          any                `json:"trained_at"`
	TrainSeconds       float64            `json:"train_seconds"`
}

// TargetInfo describes one target's model in a ModelInfo.
type TargetInfo struct {
	Ready bool `json:"ready"`
	// Kind is how the prediction is composed: linear, log-trees, or
	// linear+log-trees (a linear base with trees on the log residual).
	Kind string `json:"kind,omitempty"`
	// TrainSamples and HoldoutSamples are what the store holds now (trainer)
	// or held when the model was trained (predictor, which has no store).
	TrainSamples   int `json:"train_samples"`
	HoldoutSamples int `json:"holdout_samples"`
	// Trained* are the counts the model was trained and measured on.
	TrainedOnSamples int           `json:"trained_on_samples"`
	Holdout          model.Quality `json:"holdout"`
	HoldoutLinear    model.Quality `json:"holdout_linear"`
	Calibration      string        `json:"calibration_source,omitempty"`
	// CalibrationAdjustment is the level the model serves its tracked
	// quantile at, learned from live coverage (model.LevelAdjustment); absent
	// while every level is served as calibrated.
	CalibrationAdjustment *model.LevelAdjustment `json:"calibration_adjustment,omitempty"`
	// CalibrationOutOfRangeAdjustment is the level served to rows outside
	// the training ranges, learned from the live samples there alone
	// (model.Calibration.OutOfRange); absent while they are served like rows in
	// range.
	CalibrationOutOfRangeAdjustment *model.LevelAdjustment `json:"calibration_out_of_range_adjustment,omitempty"`
	Trees                           int                    `json:"trees"`
	TrainedAt                       any                    `json:"trained_at"`
	TrainSeconds                    float64                `json:"train_seconds"`
	FeatureRanges                   map[string]model.Range `json:"feature_ranges,omitempty"`
	Columns                         []string               `json:"columns,omitempty"`
	LinearIntercept                 float64                `json:"linear_intercept"`
	LinearCoefficients              map[string]float64     `json:"linear_coefficients,omitempty"`
	// Selection is the configuration the trainer chose for this model and
	// every candidate's error (model.Selection); absent when none was chosen.
	Selection *model.Selection `json:"selection,omitempty"`
	// Extrapolation is how much the bounds widen per training span a row
	// lies outside FeatureRanges (model.Support); absent when they do not.
	Extrapolation *ExtrapolationInfo `json:"extrapolation,omitempty"`
}

// ExtrapolationInfo is a model's Support by column name.
type ExtrapolationInfo struct {
	MeasuredColumns []string           `json:"measured_columns"`
	SpreadUp        map[string]float64 `json:"spread_up_per_span"`
	SpreadDown      map[string]float64 `json:"spread_down_per_span"`
}

// NewModelInfo describes pub (nil before the first model) as of now.
// loadedAt is when a predictor put it in service (zero on the trainer), and
// counts, when not nil, gives the store's live sample counts of a target.
func NewModelInfo(pub *bundle.Published, loadedAt, now time.Time, counts func(t features.Target) (train, holdout int)) ModelInfo {
	info := ModelInfo{TrainedAt: nil}
	if pub != nil {
		b := pub.Bundle
		info.Version = b.Version
		info.Epoch = b.Epoch
		info.Checksum = b.Checksum
		info.TrainedAt = Timestamp(b.CreatedAt)
		age := now.Sub(b.CreatedAt).Seconds()
		info.AgeSeconds = &age
		info.XGBoostMissing = b.XGBoostMissing
		if !loadedAt.IsZero() {
			info.LoadedAt = Timestamp(loadedAt)
		}
	}
	for _, t := range features.Targets {
		m := TargetModelInfo{Target: t}
		var train, holdout *int
		switch {
		case t.PerPod():
			ti := targetInfo(pub, t)
			m.Pod, train, holdout = &ti, &ti.TrainSamples, &ti.HoldoutSamples
		default:
			ti := transferInfo(pub, t)
			m.Transfer, train, holdout = &ti, &ti.TrainSamples, &ti.HoldoutSamples
		}
		if counts != nil {
			*train, *holdout = counts(t)
		}
		info.Models = append(info.Models, m)
	}
	return info
}

func targetInfo(pub *bundle.Published, t features.Target) TargetInfo {
	var m *model.TargetModel
	if pub != nil {
		m = pub.Bundle.Target(t)
	}
	if m == nil {
		return TargetInfo{TrainedAt: nil}
	}
	ti := TargetInfo{
		Ready:                           true,
		Kind:                            string(m.Kind),
		TrainSamples:                    m.TrainSamples,
		HoldoutSamples:                  m.HoldoutSamples,
		TrainedOnSamples:                m.TrainSamples,
		Holdout:                         m.Holdout,
		HoldoutLinear:                   m.HoldoutLinear,
		Calibration:                     m.Calibration.Source,
		CalibrationAdjustment:           m.Calibration.Adjustment,
		CalibrationOutOfRangeAdjustment: m.Calibration.OutOfRange,
		TrainedAt:                       Timestamp(m.TrainedAt),
		TrainSeconds:                    m.TrainSeconds,
		Columns:                         m.Columns,
		FeatureRanges:                   make(map[string]model.Range, len(m.Columns)),
		Selection:                       m.Selection,
	}
	if m.Trees != nil {
		ti.Trees = m.Trees.NumTrees()
	}
	for i, c := range m.Columns {
		ti.FeatureRanges[c] = m.Ranges[i]
	}
	if s := m.Support; s != nil {
		e := &ExtrapolationInfo{MeasuredColumns: s.Folds, SpreadUp: map[string]float64{}, SpreadDown: map[string]float64{}}
		for i, c := range m.Columns {
			e.SpreadUp[c], e.SpreadDown[c] = s.SpreadUp[i], s.SpreadDown[i]
		}
		ti.Extrapolation = e
	}
	intercept, coef := m.Linear.OriginalUnits()
	ti.LinearIntercept = intercept
	ti.LinearCoefficients = make(map[string]float64, len(coef))
	for i, c := range m.Columns {
		ti.LinearCoefficients[c] = coef[i]
	}
	return ti
}

func transferInfo(pub *bundle.Published, t features.Target) TransferInfo {
	var m *model.TransferModel
	if pub != nil {
		m = pub.Bundle.Law(t)
	}
	if m == nil {
		return TransferInfo{TrainedAt: nil}
	}
	info := TransferInfo{
		Ready: true, TrainSamples: m.TrainSamples, HoldoutSamples: m.HoldoutSamples, TrainedOnSamples: m.TrainSamples,
		Holdout: m.Holdout, HoldoutCoverage: m.HoldoutCoverage, Calibration: m.Calibration.Source,
		DefaultBytesPerToken: m.DefaultBytesPerToken, Classes: m.Classes,
		TrainedAt: Timestamp(m.TrainedAt), TrainSeconds: m.TrainSeconds,
	}
	if s := m.Shared; s != nil {
		info.SharedCoefficients = make(map[string]float64, len(s.Columns))
		for i, c := range s.Columns {
			info.SharedCoefficients[c] = s.MsPer[i]
		}
	}
	return info
}
