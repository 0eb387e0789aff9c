package fit

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit/fittest"
)

func TestPairedGain(t *testing.T) {
	for _, tc := range []struct {
		name           string
		def, cand, act []float64
		mean, se       float64
	}{
		{"the same predictions", []float64{90, 120}, []float64{90, 120}, []float64{100, 100}, 0, 0},
		// APEs 10 and 20 against 5 and 10: gains 5 and 10.
		{"better on every row", []float64{90, 120}, []float64{95, 110}, []float64{100, 100}, 7.5, 2.5},
		// Gains +10 and -10.
		{"better on one, worse on the other", []float64{90, 100}, []float64{100, 110}, []float64{100, 100}, 0, 10},
		{"unlabelled rows skipped", []float64{90, 120, 5}, []float64{95, 110, 50}, []float64{100, 100, 0}, 7.5, 2.5},
		{"one row says nothing", []float64{90}, []float64{100}, []float64{100}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mean, se := pairedGain(tc.def, tc.cand, tc.act)
			if math.Abs(mean-tc.mean) > 1e-9 || math.Abs(se-tc.se) > 1e-9 {
				t.Errorf("pairedGain = %v ± %v, want %v ± %v", mean, se, tc.mean, tc.se)
			}
		})
	}
}

func TestChoiceMargin(t *testing.T) {
	for _, tc := range []struct {
		margin float64
		rows   int
		want   float64
	}{{0.05, 100, 0.1}, {0.05, 400, 0.05}, {0.05, 1600, 0.05}, {0.2, 100, 0.2}, {0.05, 0, 1}} {
		if got := ChoiceMargin(tc.margin, tc.rows); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("ChoiceMargin(%v, %d) = %v, want %v", tc.margin, tc.rows, got, tc.want)
		}
	}
}

func TestPick(t *testing.T) {
	sc := func(name string, k model.Kind, mape float64) model.CandidateScore {
		return model.CandidateScore{Name: name, Kind: k, MAPE: mape}
	}
	kinds := func(c ...model.CandidateScore) *model.Selection { return &model.Selection{Candidates: c} }
	sel := func(mapes ...float64) *model.Selection {
		s := &model.Selection{}
		for i, m := range mapes {
			s.Candidates = append(s.Candidates, model.CandidateScore{Name: string(rune('a' + i)), MAPE: m})
		}
		return s
	}
	for _, tc := range []struct {
		name      string
		s         *model.Selection
		incumbent string
		margin    float64
		want      string
	}{
		{"best by more than the margin", sel(10, 9, 11), "a", 0.05, "b"},
		{"best by less than the margin", sel(10, 9.8, 11), "a", 0.05, "a"},
		{"incumbent is best", sel(10, 9, 11), "b", 0.05, "b"},
		{"no margin", sel(10, 9.99), "a", 0, "b"},
		{"incumbent not scored", sel(10, 9), "z", 0.05, "b"},
		{"nothing scored", sel(), "a", 0.05, "a"},
		// Within the margin of the best, the simplest is chosen: the
		// line before line and trees, those before trees alone, and the
		// best-scored of equals.
		{"the line ties the trees", kinds(sc("a", model.KindResidual, 10), sc("line", model.KindLinear, 9.1), sc("trees", model.KindLogTrees, 9), sc("line2", model.KindLinear, 9.2)), "a", 0.05, "line"},
		{"line and trees tie trees alone", kinds(sc("a", model.KindResidual, 10), sc("both", model.KindResidual, 9.3), sc("trees", model.KindLogTrees, 9)), "a", 0.05, "both"},
		{"the line is clearly worse", kinds(sc("a", model.KindResidual, 10), sc("line", model.KindLinear, 9.6), sc("trees", model.KindLogTrees, 9)), "a", 0.05, "trees"},
		{"the line does not beat the incumbent", kinds(sc("a", model.KindResidual, 9.8), sc("line", model.KindLinear, 9.4), sc("trees", model.KindLogTrees, 9)), "a", 0.05, "trees"},
		// Of one kind, the unshifted before the shifted, which has a
		// parameter more fitted to the rows; by score when not tied.
		{"the unshifted line ties the line", kinds(sc("a", model.KindResidual, 10), sc("line", model.KindLinear, 9), sc("line"+UnshiftedSuffix, model.KindLinear, 9.1)), "a", 0.05, "line" + UnshiftedSuffix},
		{"the unshifted line is clearly worse", kinds(sc("a", model.KindResidual, 10), sc("line", model.KindLinear, 8), sc("line"+UnshiftedSuffix, model.KindLinear, 9)), "a", 0.05, "line"},
		{"unshifted trees do not pass the line", kinds(sc("a", model.KindResidual, 10), sc("line", model.KindLinear, 9.1), sc("both"+UnshiftedSuffix, model.KindResidual, 9)), "a", 0.05, "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Pick(tc.s, tc.incumbent, tc.margin); got != tc.want {
				t.Errorf("pick = %q, want %q", got, tc.want)
			}
		})
	}
}

// timeRows returns n rows of load and prompt, oldest first, whose latency
// is shape(x) times log-normal noise.
func timeRows(rng *rand.Rand, n int, sd float64, shape func(x []float64) float64) Dataset {
	var d Dataset
	for range n {
		x := []float64{float64(rng.IntN(30)), float64(16 + rng.IntN(1000))}
		d.X, d.Y = append(d.X, x), append(d.Y, shape(x)*math.Exp(sd*rng.NormFloat64()))
	}
	return d
}

func testSelectConfig(fit Options) ScoreOptions {
	var s ScoreOptions
	s.SetDefaults(fit)
	return s
}

// The scores rank candidates as the data say: trees win where latency
// steps with load (a line cannot bend), and never lose much to the line
// where the line is the truth.
func TestScoreCandidatesFindsWhatTheDataHold(t *testing.T) {
	xgb := fittest.XGBoost(t)
	fit := DefaultOptions()
	fit.XGBoost = xgb
	fit.SignConstraints = false // fitSchema's directions do not matter here
	sel := testSelectConfig(fit)
	line := func(x []float64) float64 { return 10 + x[0] + x[1]/20 }
	for _, tc := range []struct {
		name  string
		shape func(x []float64) float64
		trees bool // a candidate with trees must beat the line by 20%
	}{
		{"step with load", func(x []float64) float64 {
			if x[0] >= 15 {
				return 3 * line(x)
			}
			return line(x)
		}, true},
		{"a line and noise", line, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := timeRows(rand.New(rand.NewPCG(3, 4)), 1500, 0.1, tc.shape)
			s, err := Score(context.Background(), fitSchema, d, fit, sel)
			if err != nil || s == nil {
				t.Fatalf("score: %v %v", s, err)
			}
			if s.FitRows != 900 || s.ScoreRows != 600 {
				t.Errorf("fitted on %d rows, scored on %d; want the oldest 900 and the 600 after", s.FitRows, s.ScoreRows)
			}
			mape := map[string]float64{}
			best := math.Inf(1)
			for _, c := range s.Candidates {
				mape[c.Name] = c.MAPE
				if c.Name != CandidateLine {
					best = math.Min(best, c.MAPE)
				}
			}
			t.Logf("%v", mape)
			if len(mape) != len(sel.Candidates) {
				t.Fatalf("%d scores for %d candidates", len(mape), len(sel.Candidates))
			}
			// Each candidate's paired gain over the first is the
			// difference of their MAPEs on the same rows, with a standard
			// error that says whether it is more than noise: a step the
			// line cannot follow is many standard errors of loss.
			def := s.Candidates[0]
			if def.Gain != 0 || def.GainSE != 0 {
				t.Errorf("the first candidate's gain over itself: %v ± %v", def.Gain, def.GainSE)
			}
			for _, c := range s.Candidates[1:] {
				if want := def.MAPE - c.MAPE; math.Abs(c.Gain-want) > 1e-9*def.MAPE || !(c.GainSE > 0) {
					t.Errorf("%s: gain %v ± %v, want %v ± more than 0", c.Name, c.Gain, c.GainSE, want)
				}
			}
			var lineScore model.CandidateScore
			for _, c := range s.Candidates {
				if c.Name == CandidateLine {
					lineScore = c
				}
			}
			if tc.trees && !(lineScore.Gain < -5*lineScore.GainSE) {
				t.Errorf("line's gain %v ± %v over the trees on a step", lineScore.Gain, lineScore.GainSE)
			}
			if tc.trees && !(best < mape[CandidateLine]/1.2) {
				t.Errorf("trees %.2f%%, line %.2f%%: the line cannot follow a step, the trees should", best, mape[CandidateLine])
			}
			if !tc.trees && mape[CandidateLine] > 1.02*best {
				t.Errorf("line %.2f%% against trees' best %.2f%% on a line with noise", mape[CandidateLine], best)
			}
		})
	}
}

// A choice reads only the newest MaxRows training rows, and needs enough
// of them; nothing else is given to it.
func TestScoreCandidatesRowLimits(t *testing.T) {
	fit := DefaultOptions() // no xgboost: the line alone is scored
	sel := ScoreOptions{Candidates: []Candidate{{Name: CandidateLine, Kind: model.KindLinear}}}
	sel.SetDefaults(fit)
	sel.MaxRows = 1000
	line := func(x []float64) float64 { return 10 + x[0] + x[1]/20 }
	d := timeRows(rand.New(rand.NewPCG(5, 6)), 3000, 0.05, line)
	s, err := Score(context.Background(), fitSchema, d, fit, sel)
	if err != nil || s == nil {
		t.Fatalf("score: %v %v", s, err)
	}
	if s.FitRows != 600 || s.ScoreRows != 400 {
		t.Errorf("fitted on %d, scored on %d; want 600 and 400 of the newest 1,000", s.FitRows, s.ScoreRows)
	}
	// Blocks of LargeBlockRows and more are scored alone.
	sel.MaxRows = 2500
	if s, err = Score(context.Background(), fitSchema, d, fit, sel); err != nil || s == nil || s.FitRows != 2000 || s.ScoreRows != 500 {
		t.Errorf("on 2,500 rows: %+v %v; want one block of 500 after 2,000", s, err)
	}
	// 200 rows: blocks of 40, fewer than MinScoreRows.
	if s, err := Score(context.Background(), fitSchema, timeRows(rand.New(rand.NewPCG(5, 6)), 200, 0.05, line), fit, sel); s != nil || err != nil {
		t.Errorf("scored on 200 rows: %+v %v", s, err)
	}
}

func TestDefaultCandidatesAndNames(t *testing.T) {
	fit := DefaultOptions()
	all := AllCandidates(fit)
	def := DefaultCandidates(fit)
	// By default every candidate, and the plain linear model: the line
	// unshifted; all of them have each of the four shifted ones unshifted.
	if len(def) != 5 || len(all) != 8 {
		t.Errorf("%d candidates in all, %d by default; want 8 and 5", len(all), len(def))
	}
	if u := def[len(def)-1]; u.Name != CandidateLine+UnshiftedSuffix || u.Kind != model.KindLinear || !u.NoShift {
		t.Errorf("last default candidate %+v; want the line unshifted", u)
	}
	for i, c := range def {
		if all[i] != c {
			t.Errorf("candidate %d of all is %+v, by default %+v", i, all[i], c)
		}
	}
	if all[0].Name != CandidateConfigured || all[0].Kind != fit.Kind || all[0].Params != fit.Params || all[0].NoShift {
		t.Errorf("first candidate %+v; want the configured model", all[0])
	}
	seen := map[string]bool{}
	for _, c := range all {
		if seen[c.Name] {
			t.Errorf("candidate %q twice", c.Name)
		}
		seen[c.Name] = true
		if c.Kind != model.KindLinear {
			if err := c.Params.Validate(); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
		}
		applied := c.Apply(fit)
		if applied.Kind != c.Kind || applied.NoShift != c.NoShift {
			t.Errorf("%s applied as %s, no shift %v", c.Name, applied.Kind, applied.NoShift)
		}
	}
	if !seen[CandidateLine+UnshiftedSuffix] || !seen[CandidateLogTrees] {
		t.Errorf("candidates %v", seen)
	}
	got, err := CandidatesNamed(all, []string{CandidateLine, CandidateConfigured})
	if err != nil || len(got) != 2 || got[0].Name != CandidateLine || got[1].Name != CandidateConfigured {
		t.Errorf("CandidatesNamed = %+v, %v", got, err)
	}
	if _, err := CandidatesNamed(all, []string{"depth-9"}); err == nil {
		t.Error("an unknown candidate name was accepted")
	}
}
