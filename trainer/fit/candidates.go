package fit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/xgboost"
)

// Self-tuning: a fixed model configuration, tuned on one trace, is not the
// best everywhere (docs/ACCURACY.md, "A suite of simulated workloads": on
// some workloads the line alone beats line and trees, on others trees on
// log milliseconds do). So each target chooses its configuration among a
// few candidates, from the data the trainer holds and in the time order the
// service predicts in: every candidate is fitted on the older part of the
// training rows and scored on the newest part, and the target's model is
// then fitted on every row as the best candidate says. Nothing else is
// looked at: not the holdout (the model's own measurement, and the
// publication gate's), not any later sample.

// Candidate is one configuration a target's model may be fitted with.
type Candidate struct {
	Name   string
	Kind   model.Kind
	Params xgboost.Params // the trees' (unused by model.KindLinear)
	// NoShift leaves predictions unscaled (Options.NoShift).
	NoShift bool
}

// ScoreOptions say how candidates are scored and one is chosen (Score,
// Pick). The zero value of each field means its default (SetDefaults).
type ScoreOptions struct {
	// Candidates to choose among, the default first: every choice keeps
	// it unless another candidate is better by Margin; nil means
	// DefaultCandidates of the fit's Options.
	Candidates []Candidate
	// ScoreShare is the share of the training rows in one block the
	// candidates are scored on, fitted on the rows before it (default
	// 0.2). MinScoreRows (default 50) in a block, and the fit's
	// MinTreeRows before the oldest block, are needed for a choice; until
	// then the first candidate is used.
	ScoreShare   float64
	MinScoreRows int
	// Folds is how many such blocks, newest first, the candidates are
	// scored on, each by a fit on every row before it (default 2), while
	// a block has fewer than LargeBlockRows (default 400); a block that
	// large is scored alone: it is enough rows, and one fold less keeps a
	// full store's choosing retrain within budget.
	Folds          int
	LargeBlockRows int
	// MaxRows is the most (newest) training rows one choice reads (default
	// 4,000): with LargeBlockRows, it keeps a retrain that chooses within
	// the budget of 2 s on one core for a full store (docs/PERFORMANCE.md;
	// with 10,000 rows and two folds the choice took 1.8 CPU-s more). 800
	// scored rows are plenty for a 5% margin.
	MaxRows int
	// Margin is the relative MAPE by which a candidate must beat the first
	// candidate to be chosen instead (default 0.05; more on few rows,
	// ChoiceMargin): scores of a few hundred rows
	// are noisy, and the newest rows are one stretch of time, so small
	// differences do not carry over to the rows that follow (on the
	// suite's tune lines 0.02 chose more often and won nothing; a
	// candidate that is really better, like the line on prefill-bound
	// TPOT, is 10-20% better). A switch also costs the forward samples
	// that calibrate and weigh the model some of their relevance.
	Margin float64
}

// SetDefaults gives every zero field its default; the candidates are
// those of fit's Options.
func (c *ScoreOptions) SetDefaults(fit Options) {
	if c.Candidates == nil {
		c.Candidates = DefaultCandidates(fit)
	}
	if !(c.ScoreShare > 0 && c.ScoreShare < 1) {
		c.ScoreShare = 0.2
	}
	if c.Folds <= 0 {
		c.Folds = 2
	}
	if c.LargeBlockRows <= 0 {
		c.LargeBlockRows = 400
	}
	if c.MinScoreRows <= 0 {
		c.MinScoreRows = 50
	}
	if c.MaxRows <= 0 {
		c.MaxRows = 4000
	}
	if !(c.Margin > 0) {
		c.Margin = 0.05
	}
}

// Candidate names of DefaultCandidates. An unshifted candidate's name is
// its shifted one's followed by UnshiftedSuffix: DefaultCandidates has the
// line's, AllCandidates every one's.
const (
	CandidateConfigured = "configured"   // the Options' kind and parameters
	CandidateLine       = "line"         // the linear model alone
	CandidateShallow    = "line+shallow" // the line with fewer, shallower, more regularised trees
	CandidateLogTrees   = "log-trees"    // deep trees on log ms, no line
	UnshiftedSuffix     = "-unshifted"
)

// DefaultCandidates are the configured model first, then the line alone,
// the line with smaller trees (depth 2, 100 rounds, lambda 100), deep
// trees on log milliseconds (the reference's depth-6 parameters, the
// strongest plain model on some workloads of the suite) and the line
// alone without the shift.
func DefaultCandidates(fit Options) []Candidate {
	kind := fit.Kind
	if kind == "" {
		kind = model.KindResidual
	}
	shallow := fit.Params
	shallow.MaxDepth, shallow.Rounds, shallow.Lambda = 2, 100, 100
	deep := fit.Params
	deep.MaxDepth, deep.Lambda, deep.Gamma, deep.Alpha = 6, 0.1, 0.2, 0.01
	line := Candidate{Name: CandidateLine, Kind: model.KindLinear}
	return []Candidate{
		{Name: CandidateConfigured, Kind: kind, Params: fit.Params, NoShift: fit.NoShift},
		line,
		{Name: CandidateShallow, Kind: model.KindResidual, Params: shallow},
		{Name: CandidateLogTrees, Kind: model.KindLogTrees, Params: deep},
		line.unshifted(),
	}
}

// unshifted is c without the shift (Options.NoShift), which costs no fit
// to score beside c.
func (c Candidate) unshifted() Candidate {
	c.Name, c.NoShift = c.Name+UnshiftedSuffix, true
	return c
}

// AllCandidates are DefaultCandidates and each of them without the shift.
// Of the unshifted ones only the line is in the default set: it is the
// plain linear model, which beats the shifted line on some workloads
// (docs/ACCURACY.md); on the suite's tune lines, twice as many
// candidates of nearly equal scores made the choice noisier and won
// nothing.
func AllCandidates(fit Options) []Candidate {
	out := DefaultCandidates(fit)
	for _, c := range out[:len(out):len(out)] {
		u := c.unshifted()
		if !c.NoShift && !slices.ContainsFunc(out, func(o Candidate) bool { return o.Name == u.Name }) {
			out = append(out, u)
		}
	}
	return out
}

// CandidatesNamed returns the candidates of all with the given names, in
// the order of names (the first is the incumbent of a first choice).
func CandidatesNamed(all []Candidate, names []string) ([]Candidate, error) {
	out := make([]Candidate, 0, len(names))
	for _, n := range names {
		i := slices.IndexFunc(all, func(c Candidate) bool { return c.Name == n })
		if i < 0 {
			known := make([]string, len(all))
			for j, c := range all {
				known[j] = c.Name
			}
			return nil, fmt.Errorf("no candidate %q (there are %s)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Apply returns fit configured as c.
func (c Candidate) Apply(fit Options) Options {
	fit.Kind, fit.NoShift = c.Kind, c.NoShift
	if c.Kind != model.KindLinear {
		fit.Params = c.Params
	}
	return fit
}

// Score scores every candidate on the newest MaxRows rows of
// train (oldest first, as the store returns them) in Folds steps forward in
// time: the j-th newest block of ScoreShare of them is predicted by the
// candidate fitted on every row before the block, and the score is the
// MAPE over all blocks' rows. Each fit is the line, the trees of the
// candidate's kind and the shift, as Fit makes them (the calibration does
// not move the central prediction). One block alone is one stretch of
// time, and on a trace whose load ramps it judges extrapolation to the
// newest load only. It returns nil when there are too few rows to tell
// candidates apart.
func Score(ctx context.Context, schema features.Schema, train Dataset, cfg Options, sel ScoreOptions) (*model.Selection, error) {
	rows := min(len(train.Y), sel.MaxRows)
	blockN := int(math.Round(sel.ScoreShare * float64(rows)))
	folds := sel.Folds
	if blockN >= sel.LargeBlockRows {
		folds = 1
	}
	fitN := rows - folds*blockN // the oldest fold's fit
	if blockN < sel.MinScoreRows || fitN < max(cfg.MinTreeRows, 1) {
		return nil, nil
	}
	if cfg.SignConstraints {
		cfg.Line.Signs = schema.Directions()
	}
	start := len(train.Y) - rows
	s := &model.Selection{FitRows: fitN}
	pred := make([][]float64, len(sel.Candidates))
	var actual []float64
	for j := folds; j >= 1; j-- {
		cut := start + rows - j*blockN
		older := Dataset{X: train.X[start:cut], Y: train.Y[start:cut]}
		newer := Dataset{X: train.X[cut : cut+blockN], Y: train.Y[cut : cut+blockN]}
		band := NewLabelBand(older.Y)
		older, newer = winsorise(older, band), believable(newer, band)
		base, err := scoringBase(schema, older, cfg)
		if err != nil {
			return nil, err
		}
		// Candidates that differ only in their shift share one fit.
		fitted := map[string]*model.TargetModel{}
		for i, c := range sel.Candidates {
			key := fmt.Sprintf("%s %+v", c.Kind, c.Params)
			if c.Kind == model.KindLinear {
				key = string(c.Kind)
			}
			m := fitted[key]
			if m == nil {
				if m, err = fitCandidate(ctx, base, c.Apply(cfg), older); err != nil {
					return nil, fmt.Errorf("candidate %s: %w", c.Name, err)
				}
				fitted[key] = m
			}
			shift := 0.0
			if !c.NoShift {
				shift = m.LogShift
			}
			for _, x := range newer.X {
				b, tl := m.Parts(x)
				pred[i] = append(pred[i], m.Combine(b, tl, 1, shift))
			}
		}
		actual = append(actual, newer.Y...)
	}
	s.ScoreRows = len(actual)
	if len(actual) == 0 {
		return nil, nil
	}
	for i, c := range sel.Candidates {
		gain, se := pairedGain(pred[0], pred[i], actual)
		s.Candidates = append(s.Candidates, model.CandidateScore{Name: c.Name, Kind: c.Kind,
			MAPE: model.Measure(pred[i], actual).MAPE, Gain: gain, GainSE: se})
	}
	return s, nil
}

// pairedGain returns the mean, over the rows, of how much lower (in
// percentage points) the absolute percentage error of cand is than that
// of def, and the standard error of that mean.
func pairedGain(def, cand, actual []float64) (mean, se float64) {
	var sum, sq float64
	n := 0
	for i, a := range actual {
		if !(a > 0) {
			continue
		}
		d := 100 * (math.Abs(def[i]-a) - math.Abs(cand[i]-a)) / a
		sum += d
		sq += d * d
		n++
	}
	if n < 2 {
		return 0, 0
	}
	mean = sum / float64(n)
	v := (sq - float64(n)*mean*mean) / float64(n-1)
	return mean, math.Sqrt(math.Max(v, 0) / float64(n))
}

// scoringBase is the linear model every candidate of one fold starts from,
// with Fit's floor and clamps: the line does not depend on the candidate.
func scoringBase(schema features.Schema, older Dataset, cfg Options) (model.TargetModel, error) {
	lo, hi := minMax(older.Y)
	base := model.TargetModel{
		Kind:        model.KindLinear,
		Columns:     schema.Names(),
		Ranges:      ranges(schema.Len(), older.X),
		BaseFloorMs: math.Max(lo/2, MinLatencyMs),
	}
	base.MinMs = math.Max(lo/10, MinLatencyMs)
	base.MaxMs = math.Max(hi*100, base.MinMs)
	var err error
	base.Linear, err = fitLine(older, cfg.Line, base.BaseFloorMs)
	return base, err
}

// fitCandidate fits one candidate on older from the line in base, with the
// shift it would have (LogShift; a candidate without one ignores it).
func fitCandidate(ctx context.Context, base model.TargetModel, cfg Options, older Dataset) (*model.TargetModel, error) {
	m := base
	if cfg.Kind != model.KindLinear {
		if cfg.XGBoost == nil {
			return nil, fmt.Errorf("no xgboost for %s trees", cfg.Kind)
		}
		if err := fitTrees(ctx, &m, cfg, older); err != nil {
			return nil, err
		}
	}
	if err := m.Prepare(); err != nil {
		return nil, err
	}
	m.LogShift = math.Max(-5, math.Min(5, shrunkShift(logResiduals(&m, older))))
	return &m, nil
}

// ChoiceMargin is the margin a choice on scoreRows rows asks for: at least
// margin, and more on few rows. A MAPE from n rows varies by about itself
// over √n (absolute percentage errors spread about as widely as their
// mean), so on 112 rows a candidate must be 9% better: on the shared trace
// smaller trees scored 8% better than the default there, and 3% worse on
// every larger store.
func ChoiceMargin(margin float64, scoreRows int) float64 {
	return math.Max(margin, 1/math.Sqrt(float64(max(scoreRows, 1))))
}

// Pick returns the name of the candidate with the lowest MAPE in s, unless
// it beats incumbent's by less than margin (relative), then incumbent's.
// An incumbent that was not scored is replaced by the best. Candidates
// that also beat incumbent's by margin and score within margin of the
// best are not told apart from it (the newest rows cannot, and which errs
// less on the rows after is the next stretch of time's to say): of them
// the simplest is chosen (simplicity), the best-scored among equals.
func Pick(s *model.Selection, incumbent string, margin float64) string {
	var best *model.CandidateScore
	incMAPE := math.Inf(1)
	for i, c := range s.Candidates {
		if best == nil || c.MAPE < best.MAPE {
			best = &s.Candidates[i]
		}
		if c.Name == incumbent {
			incMAPE = c.MAPE
		}
	}
	if best == nil || !(best.MAPE < incMAPE*(1-margin)) && !math.IsInf(incMAPE, 1) {
		return incumbent
	}
	pick := best
	for i, c := range s.Candidates {
		tied := c.MAPE <= best.MAPE*(1+margin) && (math.IsInf(incMAPE, 1) || c.MAPE < incMAPE*(1-margin))
		if r, pr := simplicity(c), simplicity(*pick); tied && (r < pr || r == pr && c.MAPE < pick.MAPE) {
			pick = &s.Candidates[i]
		}
	}
	return pick.Name
}

// simplicity orders candidates from the simplest, the one that bends
// least beyond its rows: the line, the line with trees, trees alone; of
// one kind, the unshifted before the shifted, which has a parameter more
// to estimate from the rows.
func simplicity(c model.CandidateScore) int {
	shifted := 1
	if strings.HasSuffix(c.Name, UnshiftedSuffix) {
		shifted = 0
	}
	switch c.Kind {
	case model.KindLinear:
		return shifted
	case model.KindResidual:
		return 2 + shifted
	}
	return 4 + shifted
}
