package model

import (
	"fmt"
	"math"
	"time"
)

// Selection records how a target's configuration was chosen: every
// candidate's error on the newest of the training rows when fitted on the
// older ones (trainer.SelectConfig), and which one the model was fitted
// with. It travels in the bundle so that both servers' /model/info show
// it, and a restarted trainer keeps the choice.
type Selection struct {
	// Chosen is the name of the candidate this model was fitted as.
	Chosen string `json:"chosen"`
	// Reason says why the choice was (re)made: "first", "rows grew",
	// "every N retrains", "drift", or "configuration changed".
	Reason string    `json:"reason"`
	At     time.Time `json:"chosen_at"`
	// TrainRows is how many training rows the target had; FitRows and
	// ScoreRows are the older training rows the candidates
	// were fitted on and the newer ones they were scored on.
	TrainRows int `json:"train_rows"`
	FitRows   int `json:"fit_rows"`
	ScoreRows int `json:"score_rows"`
	// RetrainsSince counts the models fitted with this choice before this
	// one (0: this model's fit made the choice).
	RetrainsSince int              `json:"retrains_since_choice"`
	Candidates    []CandidateScore `json:"candidates"`
}

// CandidateScore is one candidate's error in a Selection.
type CandidateScore struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// MAPE, in percent, on the Selection's ScoreRows.
	MAPE float64 `json:"mape"`
	// Gain is how much lower, in percentage points, this candidate's
	// absolute percentage error was than the first candidate's, averaged
	// over the same rows, and GainSE that mean's standard error: the
	// paired comparison a choice rests on (0 and 0 for the first).
	Gain   float64 `json:"gain_vs_default"`
	GainSE float64 `json:"gain_se"`
}

// Validate checks that s names a chosen candidate among its scores and
// that every score is a finite percentage.
func (s *Selection) Validate() error {
	if s == nil {
		return nil
	}
	found := false
	for _, c := range s.Candidates {
		if !(c.MAPE >= 0 && !math.IsInf(c.MAPE, 0)) {
			return fmt.Errorf("selection: candidate %q has MAPE %v", c.Name, c.MAPE)
		}
		if !finite(c.Gain) || !(c.GainSE >= 0 && !math.IsInf(c.GainSE, 0)) {
			return fmt.Errorf("selection: candidate %q has gain %v ± %v", c.Name, c.Gain, c.GainSE)
		}
		found = found || c.Name == s.Chosen
	}
	if !found {
		return fmt.Errorf("selection: chosen candidate %q is not among the %d scored", s.Chosen, len(s.Candidates))
	}
	return nil
}
