package demo

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/wire"
)

// outcomes runs reqs on a one-server fleet and returns their outcomes.
func outcomes(t *testing.T, reqs ...*sim.Request) []*sim.Outcome {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Servers = 1
	f, err := sim.Simulate(t.Context(), cfg, sim.FleetOptions{Router: &sim.RoundRobin{}}, reqs...)
	if err != nil {
		t.Fatal(err)
	}
	return f.Outcomes()
}

func TestEntriesAreTheRoutersSamples(t *testing.T) {
	blocks := sim.ChainBlocks([]uint64{1, 2, 3, 4, 5, 6})
	outs := outcomes(t,
		&sim.Request{ID: 1, PromptTokens: 100, OutputTokens: 40, BlockHashes: blocks},
		&sim.Request{ID: 2, Arrival: time.Millisecond, PromptTokens: 20, OutputTokens: 1},
		&sim.Request{ID: 3, Arrival: 300 * time.Millisecond, PromptTokens: 100, OutputTokens: 1, BlockHashes: blocks},
	)
	at := time.Date(2026, 1, 1, 0, 0, 1, 500, time.UTC)

	first := outs[0]
	e := TTFTEntry(first, at)
	if e.ActualTTFTMs != math.Trunc(ms(first.TTFT())) || e.ActualTTFTMs != float64(int(ms(first.TTFT()))) {
		t.Errorf("TTFT label %v, want %v truncated to whole ms", e.ActualTTFTMs, ms(first.TTFT()))
	}
	if e.ActualTPOTMs != 0 || e.Row.NumTokensGenerated != 0 || e.Row.InputTokenLength != 100 {
		t.Errorf("TTFT entry %+v: want actual_tpot_ms 0, num_tokens_generated 0, the prompt's length", e)
	}
	if body := string(wire.AppendEntry(nil, &e)); !strings.Contains(body, `"timestamp":"2026-01-01T00:00:01.0000005Z"`) {
		t.Errorf("entry sent as %s, want the report time in RFC 3339 UTC", body)
	}
	tp, ok := TPOTEntry(first, at)
	if !ok || math.Abs(tp.ActualTPOTMs-ms(first.TPOT())) > 1e-9 || tp.ActualTTFTMs != 0 || tp.Row.NumTokensGenerated != 0 {
		t.Errorf("TPOT entry %+v (ok %v), want actual_tpot_ms %v", tp, ok, ms(first.TPOT()))
	}

	// The second request was sent while the first waited for its first
	// token; the third found the first's prompt cached. Their entries say
	// so; a one-token answer has no TPOT entry.
	e = TTFTEntry(outs[1], at)
	if e.Row.NumRequestRunning != 1 || e.Row.PrefillTokensInFlight != 100 || e.Row.PrefixCacheScore != 0 {
		t.Errorf("second TTFT entry %+v: want one request and its 100 prompt tokens in flight, nothing cached", e)
	}
	second := outs[2]
	e = TTFTEntry(second, at)
	if e.Row.PrefixCacheScore != 1 || e.Row.NumRequestRunning != 1 || e.Row.PrefillTokensInFlight != 0 {
		t.Errorf("third TTFT entry %+v: want its whole prompt cached, one request in flight", e)
	}
	if _, ok := TPOTEntry(second, at); ok {
		t.Error("a one-token answer produced a TPOT entry")
	}
	// With a longer answer, its TPOT entry carries prefix_cache_score 0 as
	// llm-d's does, and the dispatch-time counts.
	r := second.Request
	r2 := *r
	r2.OutputTokens = 5
	o2 := *second
	o2.Request = &r2
	if tp, ok := TPOTEntry(&o2, at); !ok || tp.Row.PrefixCacheScore != 0 || tp.Row.NumRequestRunning != 1 {
		t.Errorf("TPOT entry %+v: want prefix_cache_score 0 and the dispatch-time counts", tp)
	}
}

func TestReporterFlushes(t *testing.T) {
	_, client := startTestService(t, true)
	ctx := context.Background()
	rep := NewReporter(client)
	if err := rep.Flush(ctx); err != nil || rep.Sent() != 0 {
		t.Fatalf("empty flush: sent %d, %v", rep.Sent(), err)
	}
	for _, o := range outcomes(t, &sim.Request{ID: 1, PromptTokens: 50, OutputTokens: 10},
		&sim.Request{ID: 2, PromptTokens: 70, OutputTokens: 3}) {
		rep.Add(TTFTEntry(o, DefaultEpoch))
		tp, _ := TPOTEntry(o, DefaultEpoch)
		rep.Add(tp)
	}
	if len(rep.pending) != 4 {
		t.Fatalf("pending %d, want 4", len(rep.pending))
	}
	if err := rep.Flush(ctx); err != nil || rep.Sent() != 4 || len(rep.pending) != 0 {
		t.Fatalf("flush: sent %d pending %d, %v", rep.Sent(), len(rep.pending), err)
	}

	// A trainer that cannot be reached: the entries stay for the next flush.
	down := NewReporter(&Client{TrainerURL: "http://127.0.0.1:1"})
	down.Add(TTFTEntry(outcomes(t, &sim.Request{ID: 1, PromptTokens: 5, OutputTokens: 1})[0], DefaultEpoch))
	if err := down.Flush(ctx); err == nil || len(down.pending) != 1 || down.Sent() != 0 {
		t.Errorf("flush to nowhere: %v, pending %d, sent %d", err, len(down.pending), down.Sent())
	}
}
