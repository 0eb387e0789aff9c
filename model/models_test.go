package model

import (
	"math"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// testTargetModel is a small, consistent residual model: a line with the
// committed small tree ensemble on top.
func testTargetModel(t testing.TB, trees bool) *TargetModel {
	t.Helper()
	cols := features.DefaultTPOTColumns
	n := len(cols)
	lin := &Linear{Intercept: 20, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	lin.Coef[features.MustSchema(cols...).Index("num_request_running")] = 0.5
	res := make([]float64, 200)
	for i := range res {
		res[i] = float64(i-100) / 500
	}
	cal, err := NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &TargetModel{
		Kind: KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 1, MinMs: 0.5, MaxMs: 10000,
		Ranges: make([]Range, n), Calibration: cal, TrainSamples: 500, HoldoutSamples: 50,
		TrainedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	}
	for i := range m.Ranges {
		m.Ranges[i] = Range{Min: 0, Max: 10}
	}
	if trees {
		tr := loadSmallModel(t)
		if tr.NumFeatures() <= n {
			m.Kind, m.Trees = KindResidual, tr
		}
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTargetModelPredictIsClampedAndFinite(t *testing.T) {
	m := testTargetModel(t, false)
	huge := features.Row{NumRequestRunning: 1 << 50}
	neg := features.Row{NumRequestRunning: -1 << 50}
	for _, row := range []features.Row{huge, neg} {
		y := m.Predict(m.Schema().Build(&row, nil))
		if math.IsNaN(y) || y < m.MinMs || y > m.MaxMs {
			t.Errorf("prediction %v outside [%v, %v]", y, m.MinMs, m.MaxMs)
		}
	}
}

func TestLinearOriginalUnits(t *testing.T) {
	l := &Linear{Intercept: 3, Coef: []float64{2, -1}, Mean: []float64{10, 5}, Scale: []float64{4, 0.5}}
	b0, b := l.OriginalUnits()
	for _, x := range [][]float64{{0, 0}, {10, 5}, {3, -7}} {
		direct := l.Predict(x)
		orig := b0 + b[0]*x[0] + b[1]*x[1]
		if math.Abs(direct-orig) > 1e-9 {
			t.Errorf("x=%v: standardised %v, original units %v", x, direct, orig)
		}
	}
}

// SamplesSeen counts the TTFT and TPOT models' training and holdout rows,
// not the transfer model's.
func TestBundleSamplesSeen(t *testing.T) {
	b := &Bundle{}
	if n := b.SamplesSeen(); n != 0 {
		t.Errorf("empty bundle saw %d samples", n)
	}
	b.TTFT = &TargetModel{TrainSamples: 500, HoldoutSamples: 50}
	b.TPOT = &TargetModel{TrainSamples: 300, HoldoutSamples: 30}
	b.Transfer = &TransferModel{TrainSamples: 1000, HoldoutSamples: 100}
	if n := b.SamplesSeen(); n != 880 {
		t.Errorf("saw %d samples, want 880", n)
	}
}
