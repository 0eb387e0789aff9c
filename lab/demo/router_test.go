package demo

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/sim"
)

func states(inFlight ...int) []sim.ServerState {
	s := make([]sim.ServerState, len(inFlight))
	for i, n := range inFlight {
		s[i] = sim.ServerState{Index: i, InFlight: n}
	}
	return s
}

func preds(pairs ...[2]float64) []Prediction {
	p := make([]Prediction, len(pairs))
	for i, x := range pairs {
		p[i] = Prediction{TTFTMs: x[0], TPOTMs: x[1]}
	}
	return p
}

func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		preds  []Prediction
		states []sim.ServerState
		slo    SLO
		want   []float64 // ±0.011: scores move in steps of 0.01
		pick   int
	}{
		{
			name:  "no SLO ranks by TTFT when TPOT is flat",
			preds: preds([2]float64{300, 20}, [2]float64{100, 20}, [2]float64{200, 20}), states: states(1, 1, 1),
			want: []float64{0.01, 1.01, 0.51}, pick: 1,
		},
		{
			name:  "no SLO ranks by TPOT when TTFT is flat",
			preds: preds([2]float64{100, 30}, [2]float64{100, 20}), states: states(1, 1),
			want: []float64{0.01, 1.01}, pick: 1,
		},
		{
			name:  "TTFT weighs 0.8 against TPOT's 0.2",
			preds: preds([2]float64{100, 30}, [2]float64{200, 20}), states: states(1, 1),
			want: []float64{0.81, 0.21}, pick: 0,
		},
		{
			name:  "all equal: ties go to the fewest in flight",
			preds: preds([2]float64{100, 20}, [2]float64{100, 20}, [2]float64{100, 20}), states: states(3, 1, 2),
			want: []float64{1.01, 1.01, 1.01}, pick: 1,
		},
		{
			name:  "idle servers come before any deficit bucket",
			preds: preds([2]float64{100, 20}, [2]float64{500, 40}, [2]float64{100, 20}), states: states(2, 0, 3),
			want: []float64{0, 1.01, 0}, pick: 1,
		},
		{
			name:  "within the SLOs, least packs onto the smallest headroom",
			preds: preds([2]float64{100, 20}, [2]float64{240, 20}, [2]float64{300, 20}), states: states(1, 1, 0),
			slo:  SLO{TTFTMs: 250, TPOTMs: 50},
			want: []float64{0.01, 1.01, 0}, pick: 1,
		},
		{
			name:  "a TTFT SLO alone: TPOT headroom is negative everywhere, TTFT-valid servers first",
			preds: preds([2]float64{100, 20}, [2]float64{200, 20}), states: states(1, 1),
			slo:  SLO{TTFTMs: 150},
			want: []float64{1.01, 0}, pick: 0,
		},
		{
			name:  "a TPOT deficit is preferred to a TTFT deficit",
			preds: preds([2]float64{200, 20}, [2]float64{100, 30}), states: states(1, 1),
			slo:  SLO{TTFTMs: 150, TPOTMs: 25},
			want: []float64{0, 1.01}, pick: 1,
		},
		{
			name:  "both in deficit: the smaller blended deficit wins",
			preds: preds([2]float64{100, 20}, [2]float64{80, 30}), states: states(1, 1),
			slo:  SLO{TTFTMs: 50, TPOTMs: 10},
			want: []float64{0.21, 0.81}, pick: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Score(tt.preds, tt.states, tt.slo)
			for i := range tt.want {
				if math.Abs(got[i]-tt.want[i]) > 0.011 {
					t.Fatalf("scores %v, want %v", got, tt.want)
				}
			}
			if p := Pick(got, tt.states); p != tt.pick {
				t.Errorf("picked %d, want %d (scores %v)", p, tt.pick, got)
			}
		})
	}
}

func TestSLOMet(t *testing.T) {
	o := &sim.Outcome{
		Request:    &sim.Request{ID: 1, PromptTokens: 10, OutputTokens: 11},
		Dispatch:   time.Second,
		FirstToken: time.Second + 100*time.Millisecond,
		Finish:     time.Second + 300*time.Millisecond, // TPOT 20 ms
		Done:       true,
	}
	tests := []struct {
		slo  SLO
		want bool
	}{
		{SLO{}, true},
		{SLO{TTFTMs: 100}, true},
		{SLO{TTFTMs: 99}, false},
		{SLO{TPOTMs: 20}, true},
		{SLO{TPOTMs: 19.9}, false},
		{SLO{TTFTMs: 150, TPOTMs: 25}, true},
	}
	for _, tt := range tests {
		if got := tt.slo.Met(o); got != tt.want {
			t.Errorf("%+v met = %v, want %v", tt.slo, got, tt.want)
		}
	}
	undone := *o
	undone.Done = false
	if (SLO{}).Met(&undone) {
		t.Error("a request that did not complete met its SLO")
	}
}

// TestPredictedRouter checks the router against a real service: it falls
// back to the composite scorer before the first model, and once a model
// has learned that uncached prompt tokens cost time, it sends a long
// prompt where it is cached.
func TestPredictedRouter(t *testing.T) {
	svc, client := startTestService(t, true)
	r := &PredictedRouter{Client: client}
	r.Bind(context.Background())
	req := &sim.Request{ID: 1, PromptTokens: 3000, OutputTokens: 100}
	st := []sim.ServerState{
		{Index: 0, KVCachePercentage: 0.1, NumRequestRunning: 2, InFlight: 2},
		{Index: 1, KVCachePercentage: 0.5, NumRequestRunning: 6, InFlight: 6, PrefixCacheScore: 0.9},
		{Index: 2, KVCachePercentage: 0.1, NumRequestRunning: 1, InFlight: 1},
	}
	want := sim.DefaultLoadPrefix().Route(req, st)
	if got := r.Route(req, st); got != want || r.Stats.NotReady != 1 || r.Last() != nil {
		t.Fatalf("without a model: routed to %d (load-prefix: %d), stats %+v, last %v", got, want, r.Stats, r.Last())
	}

	// TTFT: 40 ms plus 0.13 ms per uncached prompt token plus 1 ms per
	// request in flight, as a prefill-bound server behaves.
	var entries []features.Sample
	for i := range 300 {
		row := features.Row{
			KVCachePercentage: float64(i%10) / 20, InputTokenLength: int64(200 + 37*i%3500),
			NumRequestRunning: int64(i % 9), PrefixCacheScore: float64(i%5) / 5,
		}
		ttft := 40 + 0.13*float64(row.InputTokenLength)*(1-row.PrefixCacheScore) + float64(row.NumRequestRunning)
		entries = append(entries, features.Sample{Row: row, ActualTTFTMs: math.Trunc(ttft)},
			features.Sample{Row: row, ActualTPOTMs: 20 + float64(row.NumRequestRunning)/4})
	}
	if _, err := client.AddTrainingData(context.Background(), entries); err != nil {
		t.Fatal(err)
	}
	if ok, err := svc.Retrain(context.Background()); err != nil || !ok {
		t.Fatalf("retrain: new bundle %v, %v", ok, err)
	}
	if got := r.Route(req, st); got != 1 {
		t.Errorf("with a model: routed to %d, want 1 (the cached prompt); predictions %+v", got, r.Last())
	}
	if r.Stats.Routed != 1 || r.Stats.Failed != 0 || len(r.Last()) != len(st) {
		t.Errorf("stats %+v, last %v", r.Stats, r.Last())
	}
	if p := r.Last(); p[1].TTFTMs >= p[0].TTFTMs {
		t.Errorf("predicted TTFT %v cached vs %v uncached", p[1].TTFTMs, p[0].TTFTMs)
	}

	// A predictor that does not answer: the router fails open.
	dead := &PredictedRouter{Client: &Client{PredictorURL: "http://127.0.0.1:1"}, Timeout: time.Second}
	if got := dead.Route(req, st); got != want || dead.Stats.Failed != 1 || dead.Stats.LastError == nil {
		t.Errorf("unreachable predictor: routed to %d (want %d), stats %+v", got, want, dead.Stats)
	}
}
