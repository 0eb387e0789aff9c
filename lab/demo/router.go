package demo

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

// SLO is a request's latency objectives in milliseconds, as llm-d reads them
// from the x-llm-d-slo-ttft-ms and x-llm-d-slo-tpot-ms headers; 0 means the
// header is absent.
type SLO struct {
	TTFTMs float64 `json:"ttft_ms,omitempty"`
	TPOTMs float64 `json:"tpot_ms,omitempty"`
}

// Met reports whether an outcome met every objective that is set. A request
// that did not complete met none.
func (s SLO) Met(o *sim.Outcome) bool {
	if !o.Done {
		return false
	}
	if s.TTFTMs > 0 && ms(o.TTFT()) > s.TTFTMs {
		return false
	}
	if s.TPOTMs > 0 && o.Request.OutputTokens > 1 && ms(o.TPOT()) > s.TPOTMs {
		return false
	}
	return true
}

// Set reports whether any objective is given.
func (s SLO) Set() bool { return s.TTFTMs > 0 || s.TPOTMs > 0 }

// The latency-scorer's defaults (docs/PROTOCOL.md §7): TTFT weighs 0.8, TPOT 0.2;
// normalised headrooms are mapped to scores in steps of 1/100.
const (
	ttftWeight = 0.8
	tpotWeight = 0.2
	flatRange  = 1e-9
)

// Score is llm-d's latency-scorer (docs/PROTOCOL.md §7) with the `least` strategy, in
// streaming mode (the router reports TPOT, so TPOT counts) and without
// SLO buffer tightening (every request carries the same SLO). preds[i] is
// the prediction for states[i]. Only one bucket of candidates scores above
// 0, in this order of preference:
//
//  1. both headrooms ≥ 0;
//  2. idle candidates (nothing in flight from this router);
//  3. TPOT headroom alone negative, then TTFT alone, then both.
//
// Headroom is SLO − prediction; a missing SLO gives −prediction, so
// without SLOs every candidate lands in the last bucket and the score ranks
// by 0.8·TTFT + 0.2·TPOT, each min–max normalised across the candidates.
func Score(preds []Prediction, states []sim.ServerState, slo SLO) []float64 {
	n := len(preds)
	ttftH, tpotH := make([]float64, n), make([]float64, n)
	for i, p := range preds {
		ttftH[i] = slo.TTFTMs - p.TTFTMs
		tpotH[i] = slo.TPOTMs - p.TPOTMs
	}
	buckets := []func(i int) bool{
		func(i int) bool { return ttftH[i] >= 0 && tpotH[i] >= 0 },
		func(i int) bool { return states[i].InFlight == 0 },
		func(i int) bool { return ttftH[i] >= 0 && tpotH[i] < 0 },
		func(i int) bool { return ttftH[i] < 0 && tpotH[i] >= 0 },
		func(i int) bool { return ttftH[i] < 0 && tpotH[i] < 0 },
	}
	scores := make([]float64, n)
	for _, in := range buckets {
		var members []int
		for i := range preds {
			if in(i) {
				members = append(members, i)
			}
		}
		if len(members) == 0 {
			continue
		}
		scoreLeast(members, ttftH, tpotH, scores)
		return scores
	}
	return scores
}

// scoreLeast scores a bucket with the `least` strategy: the smaller the
// blended |headroom|, the higher the score, in (0, 1.01].
func scoreLeast(members []int, ttftH, tpotH, scores []float64) {
	loT, hiT := math.Inf(1), math.Inf(-1)
	loP, hiP := math.Inf(1), math.Inf(-1)
	for _, i := range members {
		t, p := math.Abs(ttftH[i]), math.Abs(tpotH[i])
		loT, hiT = math.Min(loT, t), math.Max(hiT, t)
		loP, hiP = math.Min(loP, p), math.Max(hiP, p)
	}
	wT, wP := ttftWeight, tpotWeight
	if hiT-loT <= flatRange {
		wT = 0
	}
	if hiP-loP <= flatRange {
		wP = 0
	}
	if wT == 0 && wP == 0 {
		wT, wP = 0.5, 0.5
	}
	wT, wP = wT/(wT+wP), wP/(wT+wP)
	for _, i := range members {
		var nT, nP float64
		if hiT-loT > flatRange {
			nT = (math.Abs(ttftH[i]) - loT) / (hiT - loT)
		}
		if hiP-loP > flatRange {
			nP = (math.Abs(tpotH[i]) - loP) / (hiP - loP)
		}
		combined := wT*nT + wP*nP
		scores[i] = (math.Floor((1-combined)*100) + 1) / 100
	}
}

// Pick returns the candidate with the highest score (llm-d's max-score
// picker); ties go to the fewest in flight, then the lowest index, as the
// simulator's own routers break them.
func Pick(scores []float64, states []sim.ServerState) int {
	best := 0
	for i := 1; i < len(scores); i++ {
		if scores[i] > scores[best] || (scores[i] == scores[best] && states[i].InFlight < states[best].InFlight) {
			best = i
		}
	}
	return best
}

// PredictedRouter routes on Headroom's predictions as llm-d's
// predicted-latency profile does: at dispatch it builds the row of every
// candidate (sim.ServerState.Row, the features llm-d builds), asks the
// predictor for all of them in one POST /predict/bulk/strict, scores them
// with Score and picks the best. Without predictions (no model yet, an
// error, a call slower than Timeout) it falls back, as llm-d fails open, to
// the composite KV/queue/prefix scorer.
type PredictedRouter struct {
	Client   *Client
	SLO      SLO
	Timeout  time.Duration // per prediction call; llm-d gives up after 400 ms
	Fallback sim.Router    // nil means sim.DefaultLoadPrefix()

	ctx  context.Context
	rows []features.Row
	last []Prediction // for the last routed request; nil when it fell back

	Stats RouterStats
}

// RouterStats count what a learning policy's router did: a
// PredictedRouter, or a P/D demo's sim.JointRouter (Split and Extrapolated
// are the pair router's only).
type RouterStats struct {
	Routed   int // requests routed on predictions
	NotReady int // fallbacks because no model existed yet
	Failed   int // fallbacks because the call failed or was too slow
	// Split counts the routed requests that were split; Extrapolated the
	// fallbacks because an extrapolated estimate could have been the
	// better route.
	Split, Extrapolated int
	LastError           error
}

// Bind sets the context prediction calls run under; Route cannot take one,
// because sim.Router's signature is the simulator's.
func (r *PredictedRouter) Bind(ctx context.Context) { r.ctx = ctx }

// Last returns the predictions made for the last routed request, in
// candidate order, or nil if it was routed without them. Valid until the
// next Route.
func (r *PredictedRouter) Last() []Prediction { return r.last }

// Route implements sim.Router.
func (r *PredictedRouter) Route(req *sim.Request, states []sim.ServerState) int {
	r.last = nil
	r.rows = r.rows[:0]
	for _, s := range states {
		r.rows = append(r.rows, predictRow(s.Row(req)))
	}
	ctx := r.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 400 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	preds, err := r.Client.Predict(ctx, r.rows)
	cancel()
	if err != nil {
		if errors.Is(err, ErrNotReady) {
			r.Stats.NotReady++
		} else {
			r.Stats.Failed++
			r.Stats.LastError = err
		}
		fb := r.Fallback
		if fb == nil {
			fb = sim.DefaultLoadPrefix()
		}
		return fb.Route(req, states)
	}
	r.Stats.Routed++
	r.last = preds
	return Pick(Score(preds, states, r.SLO), states)
}
