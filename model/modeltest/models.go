package modeltest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
)

// TargetModel is a prepared model of the TPOT columns, trained on 500 rows
// and measured on 50 at 12:00 on 29 November 2026: a line predicting 20 ms
// plus 0.5 per running request, times, with trees, 20 complete trees of
// depth 3 on its log residual. Its residuals spread ±20%.
func TargetModel(t testing.TB, trees bool) *model.TargetModel {
	t.Helper()
	cols := features.DefaultTPOTColumns
	schema := features.MustSchema(cols...)
	n := len(cols)
	lin := &model.Linear{Intercept: 20, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	lin.Coef[schema.Index("num_request_running")] = 0.5
	res := make([]float64, 200)
	for i := range res {
		res[i] = float64(i-100) / 500
	}
	cal, err := model.NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TargetModel{
		Kind: model.KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 1, MinMs: 0.5, MaxMs: 10000,
		Ranges: make([]model.Range, n), Calibration: cal, TrainSamples: 500, HoldoutSamples: 50,
		TrainedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	}
	for i := range m.Ranges {
		m.Ranges[i] = model.Range{Min: 0, Max: 10}
	}
	if trees {
		rows := []features.Row{{NumRequestRunning: 2, KVCachePercentage: 0.1}, {NumRequestRunning: 9, InputTokenLength: 700},
			{NumRequestWaiting: 3, DecodeTokensInFlight: 4000}}
		if m.Trees, err = CompleteTrees(rand.New(rand.NewPCG(7, 8)), schema, rows, 20, 3); err != nil {
			t.Fatal(err)
		}
		m.Kind = model.KindResidual
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

// Bundle is version 7 of a bundle created at 12:00:01 on 29 November 2026:
// TTFT a TargetModel with trees, TPOT one without.
func Bundle(t testing.TB) *model.Bundle {
	return &model.Bundle{Version: 7, CreatedAt: time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC),
		TTFT: TargetModel(t, true), TPOT: TargetModel(t, false)}
}

// TransferModel knows two classes: same-rack (40 GB/s, 10 µs, full
// sharing) and cross-zone (3 GB/s, 0.5 ms, half sharing, with its own
// calibration), at 160 KiB per token.
func TransferModel(t testing.TB) *model.TransferModel {
	t.Helper()
	res := make([]float64, 100)
	for i := range res {
		res[i] = float64(i-50) / 250 // ±20%
	}
	pooled, err := model.NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res {
		res[i] *= 2
	}
	wide, err := model.NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TransferModel{
		DefaultBytesPerToken: 160 << 10, MinMs: 0.001, MaxMs: 600000, Calibration: pooled,
		Classes: []model.TransferClass{
			{Class: "same-rack", LatencyMs: 0.01, BytesPerSec: 40e9, Contention: 1, UnknownContention: 1.5,
				Tokens: model.Range{Min: 100, Max: 1024}, Samples: 300},
			{Class: "cross-zone", LatencyMs: 0.5, BytesPerSec: 3e9, Contention: 0.5, UnknownContention: 1,
				Tokens: model.Range{Min: 100, Max: 1024}, Samples: 200, Calibration: wide},
		},
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}
