package sim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func runFleet(t *testing.T, cfg Config, opts FleetOptions, reqs ...*Request) *Fleet {
	t.Helper()
	f, err := Simulate(t.Context(), cfg, opts, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFleetSingleRequestMatchesClosedForm(t *testing.T) {
	cfg := testConfig()
	cfg.Servers = 3
	f := runFleet(t, cfg, FleetOptions{}, promptReq(1, 2*time.Second, 700, 9, 1))
	o := f.Outcomes()[0]
	wantTTFT, wantE2E := closedForm(cfg.Cost, 700, 9, cfg.MaxNumBatchedTokens)
	if o.Dispatch != 2*time.Second {
		t.Errorf("dispatched at %v, want the arrival", o.Dispatch)
	}
	if math.Abs(durationMs(o.TTFT())-wantTTFT) > 1e-4 || math.Abs(durationMs(o.E2E())-wantE2E) > 1e-4 {
		t.Errorf("TTFT %v E2E %v, closed form %.4f ms and %.4f ms", o.TTFT(), o.E2E(), wantTTFT, wantE2E)
	}
}

func TestFleetHooksCarryDispatchFeatures(t *testing.T) {
	cfg := testConfig()
	cfg.Servers = 1
	var dispatched, first, finished []*Outcome
	var last time.Duration
	var f *Fleet
	hooks := Hooks{
		OnDispatch: func(o *Outcome, states []ServerState) {
			if len(states) != 1 || states[0].Row(o.Request) != o.Row {
				t.Errorf("request %d: row %+v differs from the state the router saw", o.Request.ID, o.Row)
			}
			dispatched = append(dispatched, o)
		},
		OnFirstToken: func(o *Outcome) {
			if f.Now() < last || o.FirstToken != f.Now() {
				t.Errorf("first token of %d at %v reported at %v", o.Request.ID, o.FirstToken, f.Now())
			}
			last = f.Now()
			first = append(first, o)
		},
		OnFinish: func(o *Outcome) {
			if o.FirstToken == 0 || !o.Done || o.Finish != f.Now() {
				t.Errorf("request %d finished out of order", o.Request.ID)
			}
			last = f.Now()
			finished = append(finished, o)
		},
	}
	// Two requests at the same instant: the second sees the first in flight,
	// with its whole prompt still to prefill.
	reqs := []*Request{promptReq(1, 0, 300, 5, 1), promptReq(2, 0, 40, 5, 2), promptReq(3, 5*time.Second, 40, 5, 3)}
	var err error
	if f, err = NewFleet(cfg, FleetOptions{Hooks: hooks}); err != nil {
		t.Fatal(err)
	}
	if err := f.Submit(reqs...); err != nil {
		t.Fatal(err)
	}
	if err := f.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(dispatched) != 3 || len(first) != 3 || len(finished) != 3 {
		t.Fatalf("hooks called %d/%d/%d times, want 3 each", len(dispatched), len(first), len(finished))
	}
	o1, o2, o3 := f.Outcomes()[0], f.Outcomes()[1], f.Outcomes()[2]
	if o1.Row.NumRequestRunning != 0 || o1.Row.PrefillTokensInFlight != 0 {
		t.Errorf("first request saw %+v on an idle server", o1.Row)
	}
	if o2.Row.NumRequestRunning != 1 || o2.Row.PrefillTokensInFlight != 300 {
		t.Errorf("second request saw %d in flight and %d prefill tokens, want 1 and 300",
			o2.Row.NumRequestRunning, o2.Row.PrefillTokensInFlight)
	}
	if o3.Row.NumRequestRunning != 0 || o3.Row.PrefillTokensInFlight != 0 || o3.Row.KVCachePercentage != 0 {
		t.Errorf("third request, alone later, saw %+v: in-flight counts leak", o3.Row)
	}
}

func TestFleetFollowUpWaitsForAnswer(t *testing.T) {
	cfg := testConfig()
	parent := promptReq(1, 0, 64, 10, 1)
	child := promptReq(2, 0, 200, 3, 1)
	child.After, child.Think = 1, 500*time.Millisecond
	late := promptReq(3, time.Hour, 64, 3, 9)
	late.After = 1
	f := runFleet(t, cfg, FleetOptions{}, child, parent, late) // order of submission does not matter
	p, c, l := f.byID[1].Decode, f.byID[2].Decode, f.byID[3].Decode
	if c.Dispatch != p.Finish+500*time.Millisecond {
		t.Errorf("follow-up sent at %v, want the answer (%v) + think 500ms", c.Dispatch, p.Finish)
	}
	if l.Dispatch != time.Hour {
		t.Errorf("follow-up scheduled after the answer was sent at %v, want its own arrival 1h", l.Dispatch)
	}
	// The child's prompt starts with the parent's 64-token prompt, all four
	// of whose blocks were cached when the parent computed them.
	if c.PrefixHitTokens != 64 {
		t.Errorf("follow-up hit %d tokens of its parent's prompt, want 64", c.PrefixHitTokens)
	}
}

func TestFleetSubmitErrors(t *testing.T) {
	cfg := testConfig()
	dangling := promptReq(5, 0, 16, 1, 1)
	dangling.After = 99
	tests := []struct {
		name string
		reqs []*Request
		want string
	}{
		{"duplicate id", []*Request{promptReq(1, 0, 16, 1, 1), promptReq(1, 0, 16, 1, 1)}, "twice"},
		{"unknown parent", []*Request{dangling}, "never submitted"},
		{"invalid", []*Request{{ID: 1, PromptTokens: 0, OutputTokens: 1}}, "prompt"},
	}
	for _, tt := range tests {
		f, err := NewFleet(cfg, FleetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = f.Submit(tt.reqs...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.want)
		}
		if len(f.Outcomes()) != 0 || len(f.byID) != 0 {
			t.Errorf("%s: a refused batch left %d requests behind", tt.name, len(f.byID))
		}
	}
	// Submitting into the past is refused once time has moved on.
	f := runFleet(t, cfg, FleetOptions{}, promptReq(1, time.Second, 16, 1, 1))
	if err := f.Submit(promptReq(2, 0, 16, 1, 1)); err == nil {
		t.Error("a request arriving before now was accepted")
	}
}

func TestFleetRejectsBadRouterChoice(t *testing.T) {
	f, err := NewFleet(testConfig(), FleetOptions{Router: routerFunc(func(*Request, []ServerState) int { return 1 })})
	if err != nil {
		t.Fatal(err)
	}
	f.Submit(promptReq(1, 0, 16, 1, 1))
	if err := f.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "chose server 1") {
		t.Fatalf("run error %v, want the bad choice reported", err)
	}
}

func TestFleetRejectsRequestTooBigForCache(t *testing.T) {
	cfg := testConfig()
	cfg.KVBlocks = 10
	big := promptReq(1, 0, 400, 2, 1)
	child := promptReq(2, 0, 32, 2, 2)
	child.After = 1
	rejected := 0
	f := runFleet(t, cfg, FleetOptions{Hooks: Hooks{OnReject: func(*Outcome) { rejected++ }}}, big, child)
	s := f.Summary()
	if rejected != 1 || s.Rejected != 1 || s.Completed != 1 || !f.byID[2].Decode.Done {
		t.Fatalf("rejected hook %d, summary %+v: want the big one rejected and its follow-up served", rejected, s)
	}
}

func TestFleetScrapeIntervalDelaysGauges(t *testing.T) {
	for _, interval := range []time.Duration{0, time.Hour} {
		cfg := testConfig()
		cfg.Servers = 1
		var seen []ServerState
		router := routerFunc(func(_ *Request, s []ServerState) int {
			seen = append(seen, s[0])
			return 0
		})
		// The second request arrives while the first decodes.
		runFleet(t, cfg, FleetOptions{Router: router, ScrapeInterval: interval},
			promptReq(1, 0, 64, 50, 1), promptReq(2, 200*time.Millisecond, 64, 1, 2))
		second := seen[1]
		if second.InFlight != 1 {
			t.Errorf("interval %v: router's own count %d, want 1 (always current)", interval, second.InFlight)
		}
		wantRunning := 1
		if interval > 0 {
			wantRunning = 0 // still the scrape taken at the first dispatch
		}
		if second.NumRequestRunning != wantRunning {
			t.Errorf("interval %v: router saw %d running, want %d", interval, second.NumRequestRunning, wantRunning)
		}
	}
}

func TestFleetRunStopsOnContext(t *testing.T) {
	f, err := NewFleet(testConfig(), FleetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Submit(promptReq(1, 0, 16, 100, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Run(ctx); err == nil {
		t.Fatal("a cancelled run returned no error")
	}
}

// routerFunc adapts a function to Router.
type routerFunc func(req *Request, servers []ServerState) int

func (f routerFunc) Route(req *Request, servers []ServerState) int { return f(req, servers) }
