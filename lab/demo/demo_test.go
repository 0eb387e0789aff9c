package demo

import (
	"context"
	"encoding/json"
	"math"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
)

// entriesFor is the number of samples a router reports for reqs when every
// one completes: one TTFT entry each, one TPOT entry for answers longer
// than a token.
func entriesFor(reqs []*sim.Request) int {
	n := 0
	for _, r := range reqs {
		n++
		if r.OutputTokens > 1 {
			n++
		}
	}
	return n
}

// TestDemoEndToEnd runs a short demo against the real service and checks
// the two claims the demo exists to show: predictions improve as samples
// arrive, and routing on them beats round-robin's TTFT tail on traffic
// where the cache decides the prefill cost.
func TestDemoEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end demo: a few seconds with the xgboost CLI")
	}
	linearOnly := false
	if _, err := exec.LookPath("xgboost"); err != nil {
		// The service trains lines when the CLI is missing; the demo's
		// claims hold for those too, so the test runs and says which.
		t.Logf("xgboost CLI not found (%v): the trainer fits linear models only", err)
		linearOnly = true
	}
	opts := Options{
		Servers: 4, Rate: 8, Duration: 30 * time.Second, Warmup: 30 * time.Second, Seed: 1,
		// Generous, so that a starved CI machine cannot make a call miss
		// llm-d's 400 ms and change the route.
		PredictTimeout: 10 * time.Second,
		Service:        ServiceOptions{NoXGBoost: linearOnly},
	}
	var lines []string
	opts.Progress = func(p Progress) { lines = append(lines, p.String()) }
	start := time.Now()
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1f s wall\n%s", time.Since(start).Seconds(), strings.Join(lines, "\n"))
	if res.XGBoost == linearOnly {
		t.Errorf("result says xgboost %v, but the CLI was found: %v", res.XGBoost, !linearOnly)
	}

	// Every policy ran the same arrivals to completion.
	reqs, _ := Workload(opts.Duration, opts.Rate, 0.5, opts.Seed)
	warm, _ := Workload(opts.Warmup, opts.Rate, 0.5, warmupSeed(opts.Seed))
	if len(res.Policies) != len(Policies) {
		t.Fatalf("%d policies, want %d", len(res.Policies), len(Policies))
	}
	for i, p := range res.Policies {
		if p.Name != Policies[i] || p.Requests != len(reqs) || p.Completed != len(reqs) {
			t.Errorf("policy %d: %s, %d of %d completed; want %s with all %d", i, p.Name, p.Completed, p.Requests, Policies[i], len(reqs))
		}
	}

	// Every sample the router measured reached the trainer, and the
	// predicted run routed every request on predictions.
	last := res.History[len(res.History)-1]
	if want := entriesFor(warm) + entriesFor(reqs); last.Samples != want {
		t.Errorf("trainer accepted %d samples, the router measured %d", last.Samples, want)
	}
	pred := res.Policy(Predicted)
	if pred.Router.Routed != len(reqs) || pred.Router.Failed != 0 {
		t.Errorf("predicted run: %+v, want all %d routed on predictions", *pred.Router, len(reqs))
	}
	if res.History[0].Bundle == 0 || last.Bundle <= res.History[0].Bundle+3 {
		t.Errorf("bundles went from v%d to v%d: want a model at the first retrain and several more",
			res.History[0].Bundle, last.Bundle)
	}

	// Predictions improve as samples arrive. The first bundle (about 50
	// samples) against the last (about 900), on three yardsticks: the
	// trainer's holdout, the fixed probe, and the live error of the
	// predictions the router acted on (the first window that had any,
	// against the whole predicted run).
	first := res.History[0]
	var firstLive float64 = math.NaN()
	for _, p := range res.History {
		if !math.IsNaN(p.LiveMAPE.TTFT) {
			firstLive = p.LiveMAPE.TTFT
			break
		}
	}
	improved := []struct {
		what        string
		early, late float64
	}{
		{"holdout TTFT MAPE", first.HoldoutMAPE.TTFT, *res.Model.TTFT.HoldoutMAPE},
		{"probe TTFT MAPE", first.ProbeMAPE.TTFT, last.ProbeMAPE.TTFT},
		{"live TTFT MAPE", firstLive, pred.LiveMAPE.TTFT},
	}
	for _, m := range improved {
		t.Logf("%s: %.1f%% with the first bundle, %.1f%% at the end", m.what, m.early, m.late)
		if !(m.late < 0.75*m.early) {
			t.Errorf("%s went from %.1f%% to %.1f%%: want at least a quarter less", m.what, m.early, m.late)
		}
	}
	if q := *res.Model.TTFT.HoldoutMAPE; q > 20 {
		t.Errorf("final TTFT holdout MAPE %.1f%%", q)
	}

	// Routing on predictions: a much shorter TTFT tail than round-robin,
	// which ignores where each session's history is cached.
	rr := res.Policy(RoundRobin)
	t.Logf("TTFT p95: round-robin %.0f ms, least-queue %.0f ms, load-prefix %.0f ms, predicted %.0f ms, oracle %.0f ms, oracle-ttft %.0f ms",
		rr.TTFTP95Ms, res.Policy(LeastQueue).TTFTP95Ms, res.Policy(LoadPrefix).TTFTP95Ms, pred.TTFTP95Ms,
		res.Policy(Oracle).TTFTP95Ms, res.Policy(OracleTTFT).TTFTP95Ms)
	if !(pred.TTFTP95Ms < 0.8*rr.TTFTP95Ms) {
		t.Errorf("predicted TTFT p95 %.0f ms, round-robin %.0f ms: want at least 20%% less", pred.TTFTP95Ms, rr.TTFTP95Ms)
	}
	if !(pred.PrefixHitRate > rr.PrefixHitRate) {
		t.Errorf("prefix hit rate: predicted %.3f, round-robin %.3f", pred.PrefixHitRate, rr.PrefixHitRate)
	}
}

// TestDemoIsDeterministic: the same seed gives the same routes and the same
// learning curve; the service's timers run in simulated time and every
// sample carries a simulated timestamp.
func TestDemoIsDeterministic(t *testing.T) {
	opts := Options{Servers: 2, Rate: 4, Duration: 10 * time.Second, Warmup: 10 * time.Second, Seed: 5,
		PredictTimeout: 10 * time.Second, Service: ServiceOptions{NoXGBoost: true}}
	run := func() string {
		res, err := Run(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range res.History {
			res.History[i].Wall = 0
		}
		res.WallSeconds = 0
		data, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if a, b := run(), run(); a != b {
		t.Errorf("two runs differ:\n%s\n%s", a, b)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"negative duration", Options{Duration: -time.Second}, "duration"},
		{"negative servers", Options{Servers: -1}, "server"},
		{"negative rate", Options{Rate: -2}, "rate"},
		{"infinite rate", Options{Rate: math.Inf(1)}, "rate"},
		{"negative burstiness", Options{Burstiness: -1}, "burstiness"},
		{"negative SLO", Options{SLO: SLO{TTFTMs: -5}}, "SLO"},
		{"NaN SLO", Options{SLO: SLO{TPOTMs: math.NaN()}}, "SLO"},
		{"negative retrain interval", Options{RetrainEvery: -time.Second}, "interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one about %q", err, tt.want)
			}
		})
	}
	var o Options
	if err := o.setDefaults(); err != nil || o.Duration != 2*time.Minute || o.Servers != 8 || o.Epoch != DefaultEpoch {
		t.Errorf("defaults %+v, %v", o, err)
	}
}

func TestWorkloadSize(t *testing.T) {
	tests := []struct {
		window time.Duration
		rate   float64
		want   int // requests: rate × window, rounded up to whole 8-turn sessions
	}{
		{30 * time.Second, 8, 240},
		{10 * time.Second, 4, 40},
		{time.Second, 3, 8},
		{time.Millisecond, 1, 8},
	}
	for _, tt := range tests {
		reqs, err := Workload(tt.window, tt.rate, 0.5, 1)
		if err != nil || len(reqs) != tt.want {
			t.Errorf("Workload(%v, %v): %d requests, %v; want %d", tt.window, tt.rate, len(reqs), err, tt.want)
		}
	}
	a, _ := Workload(10*time.Second, 4, 0.5, 1)
	b, _ := Workload(10*time.Second, 4, 0.5, warmupSeed(1))
	if reflect.DeepEqual(a, b) {
		t.Error("the warm-up replays the comparison's traffic")
	}
}
