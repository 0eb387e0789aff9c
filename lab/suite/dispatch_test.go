package suite

import (
	"context"
	"math"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/xgboost"
)

// The tests of this file ask what was known when a request was dispatched,
// the moment a router asks for its prediction. A trace holds each row in
// the order its entry arrived, a TPOT row when its request finished, so
// the rows just before a TPOT row include requests that were dispatched
// after it and shared its batch. A replay in trace order (`headroom eval
// --mode prequential`) treats them as known.

// timedRows are one target's rows of a simulated trace in the order their
// entries arrive, each with when its request was dispatched and when its
// entry arrived.
type timedRows struct {
	target             features.Target
	samples            []features.Sample
	rows               []features.Row
	labels             []float64
	dispatch, arrivals []time.Duration
}

func (r *timedRows) add(s features.Sample, dispatch, arrival time.Duration) {
	y, _ := s.Label(r.target)
	r.samples, r.rows, r.labels = append(r.samples, s), append(r.rows, s.Row), append(r.labels, y)
	r.dispatch, r.arrivals = append(r.dispatch, dispatch), append(r.arrivals, arrival)
}

// simulateTimed runs a trace's fleet as Samples does and keeps each row's
// dispatch and arrival.
func simulateTimed(t *testing.T, tr *Trace) (ttft, tpot *timedRows) {
	t.Helper()
	reqs, err := tr.requests()
	if err != nil {
		t.Fatal(err)
	}
	router, ok := sim.NewRouter(tr.Router)
	if !ok {
		t.Fatalf("unknown router %q", tr.Router)
	}
	ttft, tpot = &timedRows{target: features.TTFT}, &timedRows{target: features.TPOT}
	_, err = sim.Simulate(context.Background(), tr.Fleet, sim.FleetOptions{Router: router, Hooks: sim.Hooks{
		OnFirstToken: func(o *sim.Outcome) {
			if ms := math.Trunc(float64(o.TTFT()) / 1e6); ms > 0 {
				ttft.add(features.Sample{Row: o.Row, ActualTTFTMs: ms}, o.Dispatch, o.FirstToken)
			}
		},
		OnFinish: func(o *sim.Outcome) {
			if o.Request.OutputTokens > 1 {
				tpot.add(features.Sample{Row: o.Row, ActualTPOTMs: float64(o.TPOT()) / 1e6}, o.Dispatch, o.Finish)
			}
		},
	}}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	return ttft, tpot
}

// recentNeighbours offers each row the window rows before it in arrival
// order, or, with atDispatch, the window latest of those whose entries had
// arrived when the row's request was dispatched: all that a predictor fed
// every sample the moment it arrives could search.
func (r *timedRows) recentNeighbours(window int, atDispatch bool) []float64 {
	return eval.Neighbours(r.rows, r.labels, func(i int, offer func(j int)) {
		for j, n := i-1, 0; j >= 0 && n < window; j-- {
			if !atDispatch || r.arrivals[j] <= r.dispatch[i] {
				offer(j)
				n++
			}
		}
	})
}

// medianUnknownAtDispatch is the median over rows of how many rows before
// each in arrival order arrived after its dispatch.
func (r *timedRows) medianUnknownAtDispatch() int {
	unknown := make([]int, len(r.rows))
	for i := range r.rows {
		for j := range i {
			if r.arrivals[j] > r.dispatch[i] {
				unknown[i]++
			}
		}
	}
	slices.Sort(unknown)
	return unknown[len(unknown)/2]
}

// mape is the MAPE of p over the rows scored says to score.
func (r *timedRows) mape(p []float64, scored func(i int) bool) float64 {
	var sum float64
	var n int
	for i := range p {
		if scored(i) && !math.IsNaN(p[i]) {
			sum += math.Abs(p[i]-r.labels[i]) / r.labels[i]
			n++
		}
	}
	return 100 * sum / float64(n)
}

// Default's regimes of one batch per pod (the P/D pool's rows mix two pod
// roles and transfers).
func perPodRegimes() []Trace {
	var out []Trace
	for _, tr := range Default().Traces {
		if tr.PD == nil {
			out = append(out, tr)
		}
	}
	return out
}

// TestRecentNeighboursSeeOnlyFinishedRequests measures what the labels of
// recent requests can tell a predictor about the next one. Searched among
// the 200 rows before each row in arrival order, the neighbours of a TPOT
// row include requests that shared its batch and finished while it was
// still decoding; searched among only the rows whose entries had arrived by
// its dispatch, the estimate is what streaming every sample to the
// predictor could buy. On the decode-bound regime, where a TPOT row's own
// decode outlives a hundred other requests, the difference is most of the
// estimate's accuracy (`go test ./lab/suite -run
// TestRecentNeighboursSeeOnlyFinishedRequests -v` prints every regime).
func TestRecentNeighboursSeeOnlyFinishedRequests(t *testing.T) {
	const window, scoredFrom = 200, 100
	for _, tr := range perPodRegimes() {
		t.Run(tr.Name, func(t *testing.T) {
			ttft, tpot := simulateTimed(t, &tr)
			for _, r := range []*timedRows{ttft, tpot} {
				scored := func(i int) bool { return i >= scoredFrom }
				inOrder := r.mape(r.recentNeighbours(window, false), scored)
				atDispatch := r.mape(r.recentNeighbours(window, true), scored)
				t.Logf("%s: %d rows, a median of %d entries arriving between a row's dispatch and its own; "+
					"MAPE of the neighbours among the %d rows before %.2f%%, among the %d known at dispatch %.2f%%",
					r.target, len(r.rows), r.medianUnknownAtDispatch(), window, inOrder, window, atDispatch)
				if tr.Name == "decode-bound" && r.target == features.TPOT && atDispatch < 1.5*inOrder {
					t.Errorf("decode-bound TPOT: neighbours known at dispatch %.2f%%, in arrival order %.2f%%: "+
						"want the batch's own requests to be a third or more of the estimate's accuracy",
						atDispatch, inOrder)
				}
			}
		})
	}
}

// TestReplayInArrivalOrderServesLaterModels measures what a replay in
// trace order flatters: it serves each block of `every` rows by a model
// fitted on the rows before the block, where the service would have served
// the row's request, when it was dispatched, by the latest model whose
// training rows had all arrived by then. The configured model is fitted on
// each target's first every, 2·every, … rows, and each row scored both
// ways, on the rows the service had a model for. `go test ./lab/suite -run
// TestReplayInArrivalOrderServesLaterModels -v` prints every regime.
func TestReplayInArrivalOrderServesLaterModels(t *testing.T) {
	if testing.Short() {
		t.Skip("fits xgboost a hundred times; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	const every = 100
	cfg := fit.DefaultOptions()
	cfg.XGBoost = &xgboost.CLI{TempDir: t.TempDir()}
	cfg.MinCalibrationRows = 0 // central predictions only, as the floor's hindsight fits
	cfg.Support = fit.SupportOptions{}
	for _, tr := range perPodRegimes() {
		t.Run(tr.Name, func(t *testing.T) {
			ttft, tpot := simulateTimed(t, &tr)
			for _, r := range []*timedRows{ttft, tpot} {
				schema := features.MustSchema(features.DefaultColumns(r.target)...)
				samples := r.samples
				// fitted[k] is trained on the first (k+1)·every rows.
				var fitted []*model.TargetModel
				for n := every; n < len(samples); n += every {
					ds := fit.BuildDataset(schema, r.target, samples[:n])
					m, err := fit.Model(context.Background(), schema, ds, ds, cfg, fit.Inputs{Quantile: 0.9})
					if err != nil {
						t.Fatalf("%s, first %d rows: %v", r.target, n, err)
					}
					fitted = append(fitted, m)
				}
				replayed, served := make([]float64, len(samples)), make([]float64, len(samples))
				inService := make([]bool, len(samples))
				for i := every; i < len(samples); i++ {
					x := schema.Build(&r.rows[i], nil)
					replayed[i] = fitted[i/every-1].Predict(x)
					for k := len(fitted) - 1; k >= 0; k-- {
						if r.arrivals[(k+1)*every-1] <= r.dispatch[i] {
							served[i], inService[i] = fitted[k].Predict(x), true
							break
						}
					}
				}
				var n int
				for _, ok := range inService {
					if ok {
						n++
					}
				}
				scored := func(i int) bool { return inService[i] }
				inOrder, atDispatch := r.mape(replayed, scored), r.mape(served, scored)
				t.Logf("%s: %d of %d rows had a model in service at dispatch; their MAPE replayed in arrival order %.2f%%, by that model %.2f%%",
					r.target, n, len(r.rows), inOrder, atDispatch)
				if tr.Name == "decode-bound" && r.target == features.TPOT && atDispatch < 1.1*inOrder {
					t.Errorf("decode-bound TPOT: %.2f%% by the model in service at dispatch, %.2f%% replayed: "+
						"want the replay to flatter it by a tenth or more", atDispatch, inOrder)
				}
			}
		})
	}
}
