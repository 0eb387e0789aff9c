package eval

import (
	"fmt"
	"sort"
	"strings"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
)

// Model names in results.
const (
	ModelHeadroom = "headroom" // the service's default model, end to end
	ModelXGBoost  = "xgboost"  // XGBoost alone on raw ms, reference hyper-parameters
	// ModelXGBoostLog is the same XGBoost trained on ln(ms) and answering
	// exp of its output: the other plain tree model a user would try.
	ModelXGBoostLog = "xgboost-log"
	ModelLinear     = "linear"   // Headroom's linear part alone
	ModelConstant   = "constant" // the median of the training labels (early life only)
	// ModelHeadroomInRange and ModelHeadroomOutOfRange are Headroom's
	// figures on the rows inside, and outside, the serving model's
	// training ranges (model.TargetModel.OutOfRange): what the quantile
	// bounds' widening out of range costs and buys.
	ModelHeadroomInRange    = "headroom:in-range"
	ModelHeadroomOutOfRange = "headroom:out-of-range"
)

// Result is one model's figures on one target. Percentages are in percent.
type Result struct {
	Target    string  `json:"target"`
	Model     string  `json:"model"`
	Rows      int     `json:"rows"`
	MAPE      float64 `json:"mape"`
	MedianAPE float64 `json:"median_ape"`
	P90APE    float64 `json:"p90_ape"`
	// Bias is the median signed percentage error; negative means the model
	// predicts too low.
	Bias float64 `json:"bias"`
	// Coverage is the percentage of rows at or below the model's predicted
	// quantile (Report.Quantile); null for models without quantiles.
	Coverage *float64 `json:"coverage"`
	// BoundWidth is the median distance of the quantile prediction from
	// the central one, in percent of the central (+10 for a q = 0.9 bound
	// 10% above the mean prediction); null with Coverage. How wide a bound
	// is says what its coverage cost.
	BoundWidth *float64 `json:"bound_width"`
	// MAPESeeds is the MAPE of each seed, in split mode.
	MAPESeeds []float64 `json:"mape_per_seed,omitempty"`
}

// Report is the outcome of one evaluation run.
type Report struct {
	Mode  string `json:"mode"`
	Trace string `json:"trace"`
	// Settings that shaped the figures.
	Scheme   string  `json:"scheme"`
	Quantile float64 `json:"quantile"`
	Seeds    int     `json:"seeds,omitempty"`
	Every    int     `json:"every,omitempty"`
	TrainMax int64   `json:"train_max,omitempty"`
	TestMin  int64   `json:"test_min,omitempty"`
	// Retrains counts the trainer runs that published a bundle.
	Retrains int `json:"retrains"`
	// Chosen counts, per target, the models of each configuration the
	// trainer chose (trainer.SelectConfig; "-": no choice was made).
	Chosen  map[string]map[string]int `json:"chosen,omitempty"`
	Results []Result                  `json:"results"`
	// EarlyLife is the prequential figures of models trained on fewer than
	// EarlyLifeMax samples, beside a constant, reported apart because they
	// are a different regime.
	EarlyLife []Result `json:"early_life,omitempty"`
	// EarlyStarts are the trace rows at which the early lives began.
	EarlyStarts []int `json:"early_starts,omitempty"`
	// Floors are, in prequential mode when asked for (BesideFloor), each
	// target's floor and Headroom's MAPE over it.
	Floors  []FloorFigure `json:"floors,omitempty"`
	Seconds float64       `json:"seconds"`
}

// Find returns the result for a target and model, or nil.
func (r *Report) Find(target features.Target, modelName string) *Result {
	return find(r.Results, target, modelName)
}

// FindEarly is Find on the early-life results.
func (r *Report) FindEarly(target features.Target, modelName string) *Result {
	return find(r.EarlyLife, target, modelName)
}

func find(rs []Result, target features.Target, modelName string) *Result {
	for i := range rs {
		if rs[i].Target == target.String() && rs[i].Model == modelName {
			return &rs[i]
		}
	}
	return nil
}

// scores accumulates one model's predictions on one target.
type scores struct {
	predicted, actual []float64
	quantile          []float64 // nil for models without quantiles
}

func (s *scores) add(predicted, actual float64) {
	s.predicted = append(s.predicted, predicted)
	s.actual = append(s.actual, actual)
}

func (s *scores) addQuantile(q float64) { s.quantile = append(s.quantile, q) }

func (s *scores) result(target features.Target, modelName string) Result {
	q := model.Measure(s.predicted, s.actual)
	r := Result{Target: target.String(), Model: modelName, Rows: q.Rows, MAPE: q.MAPE,
		MedianAPE: q.MedianAPE, P90APE: q.P90APE, Bias: q.Bias}
	if s.quantile != nil && q.Rows > 0 {
		c := model.Coverage(s.quantile, s.actual)
		r.Coverage = &c
		w := make([]float64, len(s.quantile))
		for i, q := range s.quantile {
			w[i] = 100 * (q/s.predicted[i] - 1)
		}
		bw := fit.Median(w)
		r.BoundWidth = &bw
	}
	return r
}

// tally holds every model's scores per target, in a fixed model order.
type tally struct {
	models []string
	byKey  map[tallyKey]*scores
}

type tallyKey struct {
	target features.Target
	model  string
}

func newTally(models ...string) *tally {
	return &tally{models: models, byKey: map[tallyKey]*scores{}}
}

func (t *tally) scores(target features.Target, modelName string) *scores {
	k := tallyKey{target, modelName}
	s := t.byKey[k]
	if s == nil {
		s = &scores{}
		t.byKey[k] = s
	}
	return s
}

// results lists the figures per target, then per model, skipping pairs
// with no rows.
func (t *tally) results() []Result {
	var out []Result
	for _, target := range features.PodTargets {
		for _, m := range t.models {
			s := t.byKey[tallyKey{target, m}]
			if s == nil || len(s.actual) == 0 {
				continue
			}
			out = append(out, s.result(target, m))
		}
	}
	return out
}

// meanResults averages per-seed results field by field (rows are summed),
// keeping each seed's MAPE.
func meanResults(perSeed [][]Result) []Result {
	type acc struct {
		r        Result
		n        int
		coverage float64
		covN     int
		width    float64
	}
	var order []tallyKey
	accs := map[tallyKey]*acc{}
	for _, rs := range perSeed {
		for _, r := range rs {
			t, _ := features.ParseTarget(r.Target)
			k := tallyKey{t, r.Model}
			a := accs[k]
			if a == nil {
				a = &acc{r: Result{Target: r.Target, Model: r.Model}}
				accs[k] = a
				order = append(order, k)
			}
			a.n++
			a.r.Rows += r.Rows
			a.r.MAPE += r.MAPE
			a.r.MedianAPE += r.MedianAPE
			a.r.P90APE += r.P90APE
			a.r.Bias += r.Bias
			a.r.MAPESeeds = append(a.r.MAPESeeds, r.MAPE)
			if r.Coverage != nil {
				a.coverage += *r.Coverage
				a.covN++
			}
			if r.BoundWidth != nil {
				a.width += *r.BoundWidth
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].target < order[j].target })
	out := make([]Result, 0, len(order))
	for _, k := range order {
		a := accs[k]
		n := float64(a.n)
		a.r.MAPE /= n
		a.r.MedianAPE /= n
		a.r.P90APE /= n
		a.r.Bias /= n
		if a.covN > 0 {
			c := a.coverage / float64(a.covN)
			a.r.Coverage = &c
			w := a.width / float64(a.covN)
			a.r.BoundWidth = &w
		}
		out = append(out, a.r)
	}
	return out
}

// count adds one replica's statistics to the report.
func (r *Report) count(s runStats) {
	r.Retrains += s.retrains
	for _, t := range features.PodTargets {
		for name, n := range s.chosen[t] {
			if r.Chosen == nil {
				r.Chosen = map[string]map[string]int{}
			}
			if r.Chosen[t.String()] == nil {
				r.Chosen[t.String()] = map[string]int{}
			}
			r.Chosen[t.String()][name] += n
		}
	}
}

// ChosenSummary is Chosen for target as "name×n, …", most used first.
func (r *Report) ChosenSummary(target string) string {
	type kv struct {
		name string
		n    int
	}
	var list []kv
	for name, n := range r.Chosen[target] {
		list = append(list, kv{name, n})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].n != list[j].n {
			return list[i].n > list[j].n
		}
		return list[i].name < list[j].name
	})
	parts := make([]string, len(list))
	for i, e := range list {
		parts[i] = fmt.Sprintf("%s×%d", e.name, e.n)
	}
	return strings.Join(parts, ", ")
}
