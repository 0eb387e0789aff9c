package model

import (
	"math"
	"testing"
	"time"
)

func testSelection() *Selection {
	return &Selection{Chosen: "line", Reason: "first", At: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC),
		TrainRows: 1000, FitRows: 600, ScoreRows: 400,
		Candidates: []CandidateScore{{Name: "configured", Kind: KindResidual, MAPE: 10.5}, {Name: "line", Kind: KindLinear, MAPE: 9.8, Gain: 0.7, GainSE: 0.2}}}
}

func TestSelectionValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s *Selection)
		ok     bool
	}{
		{"valid", func(*Selection) {}, true},
		{"chosen not scored", func(s *Selection) { s.Chosen = "log-trees" }, false},
		{"no candidates", func(s *Selection) { s.Candidates = nil }, false},
		{"negative MAPE", func(s *Selection) { s.Candidates[0].MAPE = -1 }, false},
		{"NaN MAPE", func(s *Selection) { s.Candidates[1].MAPE = math.NaN() }, false},
		{"infinite MAPE", func(s *Selection) { s.Candidates[1].MAPE = math.Inf(1) }, false},
		{"NaN gain", func(s *Selection) { s.Candidates[1].Gain = math.NaN() }, false},
		{"negative gain", func(s *Selection) { s.Candidates[1].Gain = -3 }, true},
		{"negative standard error", func(s *Selection) { s.Candidates[1].GainSE = -1 }, false},
		{"infinite standard error", func(s *Selection) { s.Candidates[1].GainSE = math.Inf(1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSelection()
			tc.change(s)
			if err := s.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
	var none *Selection
	if err := none.Validate(); err != nil {
		t.Errorf("a model without a selection: %v", err)
	}
}
