package model

import (
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/wire"
)

// Info is GET /model/info on both servers: what model is in service and
// how good it is, by curl.
type Info struct {
	Version        uint64     `json:"version"`
	Epoch          string     `json:"epoch,omitempty"` // the version's lineage; none from an older trainer
	Checksum       string     `json:"checksum,omitempty"`
	TrainedAt      any        `json:"trained_at"` // RFC 3339 or null
	AgeSeconds     *float64   `json:"age_seconds"`
	LoadedAt       any        `json:"loaded_at,omitempty"`
	XGBoostMissing bool       `json:"xgboost_missing"`
	TTFT           TargetInfo `json:"ttft"`
	TPOT           TargetInfo `json:"tpot"`
	// KVTransfer is the KV-transfer model of disaggregated serving.
	KVTransfer TransferInfo `json:"kv_transfer"`
}

// TransferInfo describes the KV-transfer model in an Info: its quality,
// and the law it learned per link class.
type TransferInfo struct {
	Ready bool `json:"ready"`
	// TrainSamples and HoldoutSamples are what the store holds now
	// (trainer) or held when the model was trained (predictor).
	TrainSamples     int               `json:"train_samples"`
	HoldoutSamples   int               `json:"holdout_samples"`
	TrainedOnSamples int               `json:"trained_on_samples"`
	Holdout          Quality           `json:"holdout"`
	HoldoutCoverage  *QuantileCoverage `json:"holdout_coverage,omitempty"`
	Calibration      string            `json:"calibration_source,omitempty"`
	// DefaultBytesPerToken applies to predictions and samples that do not
	// give kv_bytes_per_token; 1 means the law is in tokens.
	DefaultBytesPerToken float64         `json:"default_bytes_per_token,omitempty"`
	Classes              []TransferClass `json:"classes,omitempty"`
	TrainedAt            any             `json:"trained_at"`
	TrainSeconds         float64         `json:"train_seconds"`
}

// TargetInfo describes one target's model in an Info.
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
	TrainedOnSamples int     `json:"trained_on_samples"`
	Holdout          Quality `json:"holdout"`
	HoldoutLinear    Quality `json:"holdout_linear"`
	Calibration      string  `json:"calibration_source,omitempty"`
	// CalibrationAdjustment is the level the model serves its tracked
	// quantile at, learned from live coverage (LevelAdjustment); absent
	// while every level is served as calibrated.
	CalibrationAdjustment *LevelAdjustment `json:"calibration_adjustment,omitempty"`
	// CalibrationOutOfRangeAdjustment is the level served to rows outside
	// the training ranges, learned from the live samples there alone
	// (Calibration.OutOfRange); absent while they are served like rows in
	// range.
	CalibrationOutOfRangeAdjustment *LevelAdjustment   `json:"calibration_out_of_range_adjustment,omitempty"`
	Trees                           int                `json:"trees"`
	TrainedAt                       any                `json:"trained_at"`
	TrainSeconds                    float64            `json:"train_seconds"`
	FeatureRanges                   map[string]Range   `json:"feature_ranges,omitempty"`
	Columns                         []string           `json:"columns,omitempty"`
	LinearIntercept                 float64            `json:"linear_intercept"`
	LinearCoefficients              map[string]float64 `json:"linear_coefficients,omitempty"`
	// Selection is the configuration the trainer chose for this model and
	// every candidate's error (Selection); absent when none was chosen.
	Selection *Selection `json:"selection,omitempty"`
	// Extrapolation is how much the bounds widen per training span a row
	// lies outside FeatureRanges (Support); absent when they do not.
	Extrapolation *ExtrapolationInfo `json:"extrapolation,omitempty"`
}

// ExtrapolationInfo is a model's Support by column name.
type ExtrapolationInfo struct {
	MeasuredColumns []string           `json:"measured_columns"`
	SpreadUp        map[string]float64 `json:"spread_up_per_span"`
	SpreadDown      map[string]float64 `json:"spread_down_per_span"`
}

// NewInfo describes pub (nil before the first model) as of now. loadedAt
// is when a predictor put it in service (zero on the trainer), and counts,
// when not nil, gives the store's live sample counts of a target.
func NewInfo(pub *Published, loadedAt, now time.Time, counts func(t features.Target) (train, holdout int)) Info {
	info := Info{TrainedAt: nil}
	if pub != nil {
		b := pub.Bundle
		info.Version = b.Version
		info.Epoch = b.Epoch
		info.Checksum = b.Checksum
		info.TrainedAt = wire.Timestamp(b.CreatedAt)
		age := now.Sub(b.CreatedAt).Seconds()
		info.AgeSeconds = &age
		info.XGBoostMissing = b.XGBoostMissing
		if !loadedAt.IsZero() {
			info.LoadedAt = wire.Timestamp(loadedAt)
		}
	}
	info.KVTransfer = transferInfo(pub)
	if counts != nil {
		info.KVTransfer.TrainSamples, info.KVTransfer.HoldoutSamples = counts(features.KVTransfer)
	}
	for _, t := range features.PodTargets {
		ti := targetInfo(pub, t)
		if counts != nil {
			ti.TrainSamples, ti.HoldoutSamples = counts(t)
		}
		if t == features.TTFT {
			info.TTFT = ti
		} else {
			info.TPOT = ti
		}
	}
	return info
}

func targetInfo(pub *Published, t features.Target) TargetInfo {
	var m *TargetModel
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
		TrainedAt:                       wire.Timestamp(m.TrainedAt),
		TrainSeconds:                    m.TrainSeconds,
		Columns:                         m.Columns,
		FeatureRanges:                   make(map[string]Range, len(m.Columns)),
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

func transferInfo(pub *Published) TransferInfo {
	var m *TransferModel
	if pub != nil {
		m = pub.Bundle.Transfer
	}
	if m == nil {
		return TransferInfo{TrainedAt: nil}
	}
	return TransferInfo{
		Ready: true, TrainSamples: m.TrainSamples, HoldoutSamples: m.HoldoutSamples, TrainedOnSamples: m.TrainSamples,
		Holdout: m.Holdout, HoldoutCoverage: m.HoldoutCoverage, Calibration: m.Calibration.Source,
		DefaultBytesPerToken: m.DefaultBytesPerToken, Classes: m.Classes,
		TrainedAt: wire.Timestamp(m.TrainedAt), TrainSeconds: m.TrainSeconds,
	}
}
