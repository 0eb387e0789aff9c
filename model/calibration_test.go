package model

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestLevelAdjustmentMap(t *testing.T) {
	up := &LevelAdjustment{Quantile: 0.9, Level: 0.93}
	down := &LevelAdjustment{Quantile: 0.1, Level: 0.06}
	median := &LevelAdjustment{Quantile: 0.5, Level: 0.55}
	tests := []struct {
		name string
		a    *LevelAdjustment
		p    float64
		want float64
	}{
		{"nil serves as asked", nil, 0.9, 0.9},
		{"the tracked quantile at its level", up, 0.9, 0.93},
		{"above it, stretched towards 1", up, 0.95, 0.965},
		{"between the median and it", up, 0.7, 0.715},
		{"the median untouched", up, 0.5, 0.5},
		{"the other side untouched", up, 0.05, 0.05},
		{"the end held", up, 1, 1},
		{"a lower quantile mirrored", down, 0.1, 0.06},
		{"below it, towards 0", down, 0.05, 0.03},
		{"above a lower quantile, untouched", down, 0.95, 0.95},
		{"the median tracked moves every level", median, 0.5, 0.55},
		{"the median tracked, below", median, 0.25, 0.275},
		{"the median tracked, above", median, 0.75, 0.775},
	}
	for _, tc := range tests {
		if got := tc.a.Map(tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Map(%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
	// Monotone everywhere, so quantiles stay in order.
	for _, a := range []*LevelAdjustment{up, down, median, {Quantile: 0.9, Level: 0.81}} {
		prev := -1.0
		for p := 0.0; p <= 1; p += 0.001 {
			if m := a.Map(p); m < prev {
				t.Fatalf("%+v: Map decreases at %v", a, p)
			} else {
				prev = m
			}
		}
	}
}

func TestCalibrationReadsAtTheAdjustedLevel(t *testing.T) {
	r := make([]float64, 1000)
	for i := range r {
		r[i] = float64(i) / 1000
	}
	c, err := NewCalibration("forward", r)
	if err != nil {
		t.Fatal(err)
	}
	adj := c
	adj.Adjustment = &LevelAdjustment{Quantile: 0.9, Level: 0.95}
	if got, want := adj.LogResidual(0.9), c.LogResidual(0.95); got != want {
		t.Errorf("adjusted 0.9 reads %v, want the 0.95 quantile %v", got, want)
	}
	if adj.LogResidual(0.5) != c.LogResidual(0.5) || adj.LogResidual(0.05) != c.LogResidual(0.05) {
		t.Error("the adjustment of 0.9 moved the median or the lower bound")
	}
	if err := adj.Validate(); err != nil {
		t.Fatal(err)
	}
	// It travels with the bundle: predictors serve what the trainer chose.
	b, err := json.Marshal(adj)
	if err != nil {
		t.Fatal(err)
	}
	var back Calibration
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Adjustment == nil || *back.Adjustment != *adj.Adjustment || back.LogResidual(0.9) != adj.LogResidual(0.9) {
		t.Errorf("decoded %+v, want %+v", back.Adjustment, adj.Adjustment)
	}
	if plain, _ := json.Marshal(c); strings.Contains(string(plain), "adjustment") {
		t.Errorf("an unadjusted calibration encodes an adjustment: %s", plain)
	}
}

func TestLevelAdjustmentValidate(t *testing.T) {
	tests := []struct {
		a    LevelAdjustment
		want string // "" valid
	}{
		{LevelAdjustment{Quantile: 0.9, Level: 0.95, Samples: 10}, ""},
		{LevelAdjustment{Quantile: 0.5, Level: 0.4}, ""},
		{LevelAdjustment{Quantile: 0.1, Level: 0.2}, ""},
		{LevelAdjustment{Quantile: 0.9, Level: 0.4}, "across the median"},
		{LevelAdjustment{Quantile: 0.1, Level: 0.6}, "across the median"},
		{LevelAdjustment{Quantile: 0.9, Level: 1}, "outside"},
		{LevelAdjustment{Quantile: 0.9, Level: math.NaN()}, "outside"},
		{LevelAdjustment{Quantile: 0, Level: 0.5}, "quantile"},
		{LevelAdjustment{Quantile: 0.9, Level: 0.95, Samples: -1}, "samples"},
	}
	for _, tc := range tests {
		err := tc.a.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.a, err, tc.want)
		}
	}
}

// Rows outside the training ranges are read at their own level when the
// calibration carries one, and at the in-range one otherwise.
func TestCalibrationServedAt(t *testing.T) {
	r := make([]float64, 1000)
	for i := range r {
		r[i] = float64(i) / 1000
	}
	plain, err := NewCalibration("forward", r)
	if err != nil {
		t.Fatal(err)
	}
	in := &LevelAdjustment{Quantile: 0.9, Level: 0.93}
	out := &LevelAdjustment{Quantile: 0.9, Level: 0.98}
	both := plain
	both.Adjustment, both.OutOfRange = in, out
	inOnly := plain
	inOnly.Adjustment = in
	tests := []struct {
		name       string
		c          Calibration
		q          float64
		outOfRange bool
		wantLevel  float64
		wantRead   float64 // the residual the served calibration reads at wantLevel
	}{
		{"in range: the in-range level", both, 0.9, false, 0.9, plain.LogResidual(0.93)},
		{"out of range: its own level", both, 0.9, true, 0.98, plain.LogResidual(0.98)},
		{"out of range, above it: stretched with it", both, 0.95, true, 0.99, plain.LogResidual(0.99)},
		{"out of range, the lower bound untouched", both, 0.05, true, 0.05, plain.LogResidual(0.05)},
		{"out of range without its own: as in range", inOnly, 0.9, true, 0.9, plain.LogResidual(0.93)},
		{"nothing carried", plain, 0.9, true, 0.9, plain.LogResidual(0.9)},
	}
	for _, tc := range tests {
		c, level := tc.c.ServedAt(tc.q, tc.outOfRange)
		if math.Abs(level-tc.wantLevel) > 1e-12 || math.Abs(c.LogResidual(level)-tc.wantRead) > 1e-12 {
			t.Errorf("%s: level %v reading %v, want %v reading %v", tc.name, level, c.LogResidual(level), tc.wantLevel, tc.wantRead)
		}
	}
}

func TestCalibrationOutOfRangeEncoding(t *testing.T) {
	r := make([]float64, 100)
	for i := range r {
		r[i] = float64(i) / 100
	}
	c, err := NewCalibration("forward", r)
	if err != nil {
		t.Fatal(err)
	}
	c.Adjustment = &LevelAdjustment{Quantile: 0.9, Level: 0.92, Samples: 300}
	c.OutOfRange = &LevelAdjustment{Quantile: 0.9, Level: 0.985, Samples: 40}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Calibration
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.OutOfRange == nil || *back.OutOfRange != *c.OutOfRange || back.Validate() != nil {
		t.Errorf("decoded out-of-range adjustment %+v, want %+v", back.OutOfRange, c.OutOfRange)
	}
	// A bundle written before the out-of-range level decodes and serves
	// its rows out of range as in range.
	old := strings.Replace(string(b), `"out_of_range_adjustment"`, `"ignored"`, 1)
	var before Calibration
	if err := json.Unmarshal([]byte(old), &before); err != nil {
		t.Fatal(err)
	}
	if before.OutOfRange != nil || before.Validate() != nil {
		t.Errorf("an old calibration decoded %+v", before.OutOfRange)
	}
	if cc, l := before.ServedAt(0.9, true); cc.LogResidual(l) != c.LogResidual(0.9) {
		t.Errorf("an old calibration serves out of range at %v, want the in-range %v", cc.LogResidual(l), c.LogResidual(0.9))
	}
	bad := c
	bad.OutOfRange = &LevelAdjustment{Quantile: 0.9, Level: 0.3}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("an out-of-range level across the median: error %v", err)
	}
}
