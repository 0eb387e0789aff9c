package demo

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/headroomhq/headroom/lab/sim"
)

// The oracle policies route on what the simulator foresees (sim.Lookahead):
// the latency a request would get on each candidate given everything
// present at dispatch, and nothing of what arrives later.
const (
	// Oracle is the predicted policy with a perfect predictor: llm-d's
	// latency scorer (Score, Pick, without SLOs) fed foreseen TTFT and TPOT
	// instead of predictions. Same decision rule, so predicted − oracle is
	// what prediction error costs.
	Oracle = "oracle"
	// OracleSLO is the same with the run's SLOs; it runs only when SLOs are
	// set, and is then the oracle of the predicted policy (which routes on
	// SLO headroom).
	OracleSLO = "oracle-slo"
	// OracleTTFT is sim.TTFTOracle: each request where its first token
	// comes soonest. Not a bound: it shows what the decision rule is worth.
	OracleTTFT = "oracle-ttft"
)

// PoliciesFor lists the policies a run compares: Policies, and OracleSLO
// when slo sets an objective.
func PoliciesFor(slo SLO) []string {
	if slo.Set() {
		return append(slices.Clone(Policies), OracleSLO)
	}
	return slices.Clone(Policies)
}

// OracleRouter scores candidates as PredictedRouter does, on foreseen
// latencies: it looks ahead on every candidate to the request's last token
// (TPOT counts in the score, so the first token is not enough).
type OracleRouter struct {
	SLO      SLO
	foreseen []Prediction
	last     Prediction
}

// Route implements sim.Router for callers without a fleet: without a
// lookahead there is nothing to foresee, so it routes as DefaultLoadPrefix.
// A sim.Fleet always calls RouteLookahead.
func (r *OracleRouter) Route(req *sim.Request, states []sim.ServerState) int {
	r.last = Prediction{}
	return sim.DefaultLoadPrefix().Route(req, states)
}

// RouteLookahead implements sim.LookaheadRouter.
func (r *OracleRouter) RouteLookahead(req *sim.Request, states []sim.ServerState, la *sim.Lookahead) int {
	var ok bool
	if r.foreseen, ok = foresee(la, len(states), r.foreseen); !ok {
		r.last = Prediction{}
		return sim.DefaultLoadPrefix().Route(req, states)
	}
	i := Pick(Score(r.foreseen, states, r.SLO), states)
	r.last = r.foreseen[i]
	return i
}

// Foresight is what the router foresaw for the last request on the server
// it chose; zero when it could not look ahead.
func (r *OracleRouter) Foresight() Prediction { return r.last }

// foresee looks ahead on every candidate to the request's finish; false
// when the request fits nowhere (the servers are identical).
func foresee(la *sim.Lookahead, n int, dst []Prediction) ([]Prediction, bool) {
	dst = dst[:0]
	for i := range n {
		fs, ok := la.Finish(i)
		if !ok {
			return dst, false
		}
		dst = append(dst, Prediction{TTFTMs: ms(fs.TTFT), TPOTMs: ms(fs.TPOT)})
	}
	return dst, true
}

// TTFTPoint is one routed request: the TTFT the router expected on the
// server it chose (predicted, or foreseen by an oracle) and the TTFT it got.
type TTFTPoint struct {
	ExpectedMs float64
	ActualMs   float64
}

// Regret explains the predicted policy's gap to the oracle decision by
// decision: at every request routed on predictions, the oracle's choice is
// computed on the same state (same rule, foreseen latencies), and where the
// two differ, the prediction error responsible is named.
type Regret struct {
	Decisions int `json:"decisions"` // routed on predictions
	// Disagreements chose another server than the oracle would have.
	Disagreements int `json:"disagreements"`
	// What the disagreements cost, as foreseen at dispatch: the chosen
	// server's TTFT and TPOT minus the oracle's choice's, summed.
	TTFTMs float64 `json:"ttft_cost_ms"`
	TPOTMs float64 `json:"tpot_cost_ms"`
	// ByCause splits the disagreements, costliest (TTFT) first.
	ByCause []RegretCause `json:"by_cause"`
	// Errors is the prediction error over every candidate of every
	// decision against the foresight, by regime.
	Errors []RegimeError `json:"errors"`
}

// RegretCause is one cause of disagreements: which prediction misled the
// router (TTFT, TPOT, either alone or only both), and how the server it
// chose differed from the oracle's.
type RegretCause struct {
	Cause     string  `json:"cause"`
	Decisions int     `json:"decisions"`
	TTFTMs    float64 `json:"ttft_cost_ms"`
	TPOTMs    float64 `json:"tpot_cost_ms"`
	// Mean signed TTFT error (prediction − foresight) on the server chosen
	// and on the oracle's, in ms: too optimistic about the first, or too
	// pessimistic about the second.
	ChosenErrMs float64 `json:"chosen_ttft_error_ms"`
	OracleErrMs float64 `json:"oracle_ttft_error_ms"`
}

// RegimeError is the prediction error in one regime of candidates, against
// the foresight.
type RegimeError struct {
	Regime     string  `json:"regime"`
	Candidates int     `json:"candidates"`
	TTFTMAPE   float64 `json:"ttft_mape"`
	TTFTBiasMs float64 `json:"ttft_mean_error_ms"`
	TPOTMAPE   float64 `json:"tpot_mape"`
	TPOTBiasMs float64 `json:"tpot_mean_error_ms"`
}

// cacheGap is the difference in prefix score that makes one candidate
// "more cached" than another.
const cacheGap = 0.1

// regretRecorder foresees every candidate of every decision the predicted
// router makes (the lookahead leaves the run as it would be) and keeps
// what it needs to explain the decisions that differ from the oracle's.
type regretRecorder struct {
	inner *PredictedRouter
	slo   SLO

	rep     Regret
	causes  map[string]*causeAcc
	regimes map[string]*regimeAcc
	fore    []Prediction
	mixed   []Prediction
}

type causeAcc struct {
	n                      int
	ttft, tpot, errC, errO float64
}

type regimeAcc struct {
	n                                  int
	ttftAPE, ttftErr, tpotAPE, tpotErr float64
	tpotN                              int
}

// Route implements sim.Router: without a lookahead there is nothing to
// record.
func (r *regretRecorder) Route(req *sim.Request, states []sim.ServerState) int {
	return r.inner.Route(req, states)
}

// RouteLookahead implements sim.LookaheadRouter.
func (r *regretRecorder) RouteLookahead(req *sim.Request, states []sim.ServerState, la *sim.Lookahead) int {
	c := r.inner.Route(req, states)
	preds := r.inner.Last()
	if preds == nil {
		return c
	}
	var ok bool
	if r.fore, ok = foresee(la, len(states), r.fore); !ok {
		return c
	}
	r.record(preds, r.fore, states, c)
	return c
}

// record adds one decision: the predictions the router acted on, the
// foresight on every candidate, and the candidate it chose.
func (r *regretRecorder) record(preds, fore []Prediction, states []sim.ServerState, c int) {
	if r.causes == nil {
		r.causes, r.regimes = map[string]*causeAcc{}, map[string]*regimeAcc{}
	}
	r.rep.Decisions++
	for j, s := range states {
		key := regime(s)
		a := r.regimes[key]
		if a == nil {
			a = &regimeAcc{}
			r.regimes[key] = a
		}
		p, f := preds[j], fore[j]
		a.n++
		a.ttftAPE += 100 * math.Abs(p.TTFTMs-f.TTFTMs) / f.TTFTMs
		a.ttftErr += p.TTFTMs - f.TTFTMs
		if f.TPOTMs > 0 {
			a.tpotN++
			a.tpotAPE += 100 * math.Abs(p.TPOTMs-f.TPOTMs) / f.TPOTMs
			a.tpotErr += p.TPOTMs - f.TPOTMs
		}
	}
	o := Pick(Score(fore, states, r.slo), states)
	if o == c {
		return
	}
	// Which prediction misled: put the foresight in place of one target's
	// predictions at a time and see whether the choice comes right.
	pickWith := func(foreTTFT bool) int {
		r.mixed = r.mixed[:0]
		for j := range states {
			m := preds[j]
			if foreTTFT {
				m.TTFTMs = fore[j].TTFTMs
			} else {
				m.TPOTMs = fore[j].TPOTMs
			}
			r.mixed = append(r.mixed, m)
		}
		return Pick(Score(r.mixed, states, r.slo), states)
	}
	var target string
	switch ttftFixes, tpotFixes := pickWith(true) == o, pickWith(false) == o; {
	case ttftFixes && tpotFixes:
		target = "TTFT or TPOT error"
	case ttftFixes:
		target = "TTFT error"
	case tpotFixes:
		target = "TPOT error"
	default:
		target = "TTFT and TPOT errors"
	}
	var where string
	switch hc, ho := states[c].PrefixCacheScore, states[o].PrefixCacheScore; {
	case ho > hc+cacheGap:
		where = "passed over a more cached server"
	case hc > ho+cacheGap:
		where = "chose a more cached server"
	default:
		where = "between equally cached servers"
	}
	cause := target + ", " + where
	a := r.causes[cause]
	if a == nil {
		a = &causeAcc{}
		r.causes[cause] = a
	}
	dTTFT, dTPOT := fore[c].TTFTMs-fore[o].TTFTMs, fore[c].TPOTMs-fore[o].TPOTMs
	a.n++
	a.ttft += dTTFT
	a.tpot += dTPOT
	a.errC += preds[c].TTFTMs - fore[c].TTFTMs
	a.errO += preds[o].TTFTMs - fore[o].TTFTMs
	r.rep.Disagreements++
	r.rep.TTFTMs += dTTFT
	r.rep.TPOTMs += dTPOT
}

// report returns what was recorded.
func (r *regretRecorder) report() *Regret {
	rep := r.rep
	rep.ByCause, rep.Errors = []RegretCause{}, []RegimeError{}
	for cause, a := range r.causes {
		n := float64(a.n)
		rep.ByCause = append(rep.ByCause, RegretCause{Cause: cause, Decisions: a.n, TTFTMs: a.ttft, TPOTMs: a.tpot,
			ChosenErrMs: a.errC / n, OracleErrMs: a.errO / n})
	}
	slices.SortFunc(rep.ByCause, func(a, b RegretCause) int {
		return cmp.Or(cmp.Compare(b.TTFTMs, a.TTFTMs), cmp.Compare(a.Cause, b.Cause))
	})
	for key, a := range r.regimes {
		e := RegimeError{Regime: key, Candidates: a.n, TTFTMAPE: a.ttftAPE / float64(a.n), TTFTBiasMs: a.ttftErr / float64(a.n)}
		if a.tpotN > 0 {
			e.TPOTMAPE, e.TPOTBiasMs = a.tpotAPE/float64(a.tpotN), a.tpotErr/float64(a.tpotN)
		}
		rep.Errors = append(rep.Errors, e)
	}
	slices.SortFunc(rep.Errors, func(a, b RegimeError) int { return cmp.Compare(a.Regime, b.Regime) })
	return &rep
}

// regime names a candidate's situation: how much of the prompt is cached
// there and how much uncached prefill is queued ahead of it.
func regime(s sim.ServerState) string {
	cache := "miss (<50% cached)"
	if s.PrefixCacheScore >= 0.5 {
		cache = "hit (>=50% cached)"
	}
	var load string
	switch q := s.PrefillTokensInFlight; {
	case q == 0:
		load = "no prefill queued"
	case q < 4096:
		load = "<4k prefill tokens queued"
	default:
		load = ">=4k prefill tokens queued"
	}
	return cache + ", " + load
}

// oracle is the single-pool oracle policy of that name, with what it
// foresaw for the request it routed last (false when it could not look
// ahead).
func oracle(name string, slo SLO) (sim.Router, func() (estimate, bool), error) {
	switch name {
	case OracleTTFT:
		o := &sim.TTFTOracle{}
		return o, func() (estimate, bool) {
			return estimate{TTFTMs: ms(o.Foresight()), TPOTMs: math.NaN()}, o.Foresight() > 0
		}, nil
	case Oracle, OracleSLO:
		o := &OracleRouter{}
		if name == OracleSLO {
			o.SLO = slo
		}
		return o, func() (estimate, bool) {
			p := o.Foresight()
			return estimate{TTFTMs: p.TTFTMs, TPOTMs: p.TPOTMs}, p.TTFTMs > 0
		}, nil
	}
	return nil, nil, fmt.Errorf("demo: no oracle %q", name)
}
