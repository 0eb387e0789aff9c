package model

import (
	"math"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// Predict composes the parts exactly as Combine says, with the tree weight
// and shift the model carries; the linear part ignores both.
func TestPredictComposesParts(t *testing.T) {
	m := testTargetModel(t, true)
	if m.Kind != KindResidual {
		t.Skip("the committed small model does not fit the TPOT columns")
	}
	m.MaxMs = 1e300 // the committed trees are not log residuals: keep them unclamped
	row := features.Row{NumRequestRunning: 7, InputTokenLength: 300, KVCachePercentage: 0.2}
	x := m.Schema().Build(&row, nil)
	base, treeLog := m.Parts(x)
	if base != m.PredictLinear(x) || treeLog == 0 {
		t.Fatalf("parts %v, %v; linear %v", base, treeLog, m.PredictLinear(x))
	}
	full := m.Predict(x)
	if want := base * math.Exp(treeLog); math.Abs(full-want) > 1e-9*want {
		t.Errorf("Predict %v, want base·exp(trees) = %v", full, want)
	}
	m.TreeShrink, m.LogShift = 1, math.Log(1.5)
	if got := m.Predict(x); math.Abs(got-1.5*base) > 1e-9*base {
		t.Errorf("with the trees shrunk away and a 1.5x shift: %v, want %v", got, 1.5*base)
	}
	m.TreeShrink = 0.5
	if got, want := m.Predict(x), m.Combine(base, treeLog, 0.5, m.LogShift); got != want {
		t.Errorf("Predict %v, Combine %v", got, want)
	}
	if m.PredictLinear(x) != base {
		t.Error("the shift or the tree weight leaked into the linear part")
	}
}

func TestPrepareRefusesBadShrinkAndShift(t *testing.T) {
	for _, tt := range []struct {
		name          string
		shrink, shift float64
	}{
		{"shrink below 0", -0.1, 0},
		{"shrink above 1", 1.5, 0},
		{"shrink NaN", math.NaN(), 0},
		{"shift NaN", 0, math.NaN()},
		{"shift huge", 0, 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := testTargetModel(t, false)
			m.TreeShrink, m.LogShift = tt.shrink, tt.shift
			if err := m.Prepare(); err == nil {
				t.Fatal("Prepare accepted it")
			}
		})
	}
}

// With few residuals the calibration takes the conformal rank, so that a
// fresh row is below the q point with probability at least q.
func TestCalibrationConformalRank(t *testing.T) {
	r := make([]float64, 19)
	for i := range r {
		r[i] = float64(i + 1) // 1..19
	}
	c, err := NewCalibration("cross-validation", r)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 0.9·20 = 18 of 19; the type-7 definition would give 17.2.
	if got := c.LogResidual(0.9); math.Abs(got-18) > 1e-9 {
		t.Errorf("90%% point %v, want 18", got)
	}
	if got := c.LogResidual(0.5); math.Abs(got-10) > 1e-9 {
		t.Errorf("median %v, want 10", got)
	}
	// Beyond the data it holds the ends.
	if c.LogResidual(0.99) != 19 || c.LogResidual(0.01) != 1 {
		t.Errorf("ends %v, %v", c.LogResidual(0.01), c.LogResidual(0.99))
	}
}

// PredictRows is Predict row by row, bit for bit, for every kind of model.
func TestPredictRowsIsPredictForEveryKind(t *testing.T) {
	withTrees := testTargetModel(t, true)
	linear := testTargetModel(t, false)
	if withTrees.Kind != KindResidual || linear.Kind != KindLinear {
		t.Fatalf("test models of kinds %s and %s", withTrees.Kind, linear.Kind)
	}
	logTrees := *withTrees
	logTrees.Kind = KindLogTrees
	rows := []features.Row{{NumRequestRunning: 7, InputTokenLength: 300, KVCachePercentage: 0.2},
		{NumRequestWaiting: 2, InputTokenLength: 9000}, {}, {NumRequestRunning: 40, KVCachePercentage: 0.9}}
	for _, m := range []*TargetModel{withTrees, linear, &logTrees} {
		width := m.Schema().Len()
		var x []float64
		for i := range rows {
			x = append(x, m.Schema().Build(&rows[i], nil)...)
		}
		got := make([]float64, len(rows))
		m.PredictRows(x, width, got)
		for r := range rows {
			if want := m.Predict(x[r*width : (r+1)*width]); math.Float64bits(got[r]) != math.Float64bits(want) {
				t.Errorf("%s: row %d: PredictRows %v, Predict %v", m.Kind, r, got[r], want)
			}
		}
	}
}
