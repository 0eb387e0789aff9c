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
