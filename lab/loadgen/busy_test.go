package loadgen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSplitBusy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// One prediction every millisecond for 10 s: 1 ms each, 5 ms inside
	// [2 s, 3 s) and [6 s, 6.5 s).
	var timeline []timed
	for i := range 10000 {
		lat := time.Millisecond
		if (i >= 2000 && i < 3000) || (i >= 6000 && i < 6500) {
			lat = 5 * time.Millisecond
		}
		timeline = append(timeline, timed{at(i).UnixNano(), lat})
	}
	training := []span{{at(2000), at(2600)}, {at(2500), at(3000)}} // overlapping: one span
	swaps := []span{{at(6000), at(6500)}}
	s := splitBusy(timeline, training, swaps, at(0), at(10000), false)
	if s == nil {
		t.Fatal("no summary")
	}
	// A span's end is inclusive: the prediction at 3,000 ms counts as busy.
	if s.Requests != 1502 || s.Training.Spans != 2 || s.Swaps.Spans != 1 {
		t.Errorf("requests %d, runs %d, swaps %d; want 1502, 2, 1", s.Requests, s.Training.Spans, s.Swaps.Spans)
	}
	if s.Training.Requests != 1001 || s.Swaps.Requests != 501 || s.Training.Seconds != 1 || s.Swaps.Seconds != 0.5 {
		t.Errorf("training %+v, swaps %+v; want 1,001 requests in 1 s and 501 in 0.5 s", s.Training, s.Swaps)
	}
	if math.Abs(s.Seconds-1.5) > 1e-9 {
		t.Errorf("busy %v s, want 1.5", s.Seconds)
	}
	if s.P50Ms < 5 || s.P50Ms > 5.1 || s.Outside.P99Ms < 1 || s.Outside.P99Ms > 1.02 {
		t.Errorf("busy p50 %v ms, outside p99 %v ms; want 5 and 1", s.P50Ms, s.Outside.P99Ms)
	}
	if math.Abs(s.P99Ratio-s.P99Ms/s.Outside.P99Ms) > 1e-12 || s.P99Ratio < 4.9 {
		t.Errorf("p99 ratio %v", s.P99Ratio)
	}

	// Busy time is counted inside the measured window only.
	if s := splitBusy(timeline, []span{{at(-500), at(500)}}, nil, at(0), at(10000), false); math.Abs(s.Seconds-0.5) > 1e-9 {
		t.Errorf("span half before the window: %v s, want 0.5", s.Seconds)
	}
	if splitBusy(timeline, nil, nil, at(0), at(10000), false) != nil {
		t.Error("a summary without spans")
	}
	if splitBusy(nil, training, nil, at(0), at(10000), false) != nil {
		t.Error("a summary without predictions")
	}
}

func TestMergeSpans(t *testing.T) {
	t0 := time.Unix(0, 0)
	sp := func(a, b int) span { return span{t0.Add(time.Duration(a)), t0.Add(time.Duration(b))} }
	for _, tc := range []struct {
		in, want []span
	}{
		{nil, nil},
		{[]span{sp(5, 6), sp(1, 2)}, []span{sp(1, 2), sp(5, 6)}},
		{[]span{sp(1, 4), sp(2, 3)}, []span{sp(1, 4)}},
		{[]span{sp(3, 5), sp(1, 3), sp(9, 10)}, []span{sp(1, 5), sp(9, 10)}},
	} {
		got := mergeSpans(tc.in)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("mergeSpans = %v, want %v", got, tc.want)
		}
	}
}

// TestRunSplitsLatencyByServerWork runs against fake servers: the trainer
// reports a training run and the predictor a bundle load, each covering
// part of the run, and the predictor answers slowly in one of them. The
// summary must find the spans in /status and /metrics and put the slow
// answers on the busy side.
//
// The slow answers take slowFor, far beyond what a loaded CI machine adds to
// a loopback request, and the outside side is judged by its p90, not its
// maximum: misplaced slow answers would be a quarter of it, while the odd
// scheduling stall is one or two requests.
func TestRunSplitsLatencyByServerWork(t *testing.T) {
	const (
		slowFor = 50 * time.Millisecond
		// After the first prediction: far enough in that the spans,
		// widened by busyLead and busyTail, lie inside the measured window.
		trainAfter = 600 * time.Millisecond
		trainFor   = 200 * time.Millisecond
		loadAfter  = 500 * time.Millisecond // after the training began
	)
	// The servers' clocks are events, not timers: training begins with the
	// first prediction to arrive trainAfter past the first prediction (the
	// first job of the schedule), so a loaded machine that starves the
	// process for a while moves the spans instead of leaving the training
	// span without a single answer in it.
	var first, trainNs atomic.Int64 // Unix ns; 0 before
	training := func() (trainAt time.Time, ok bool) {
		ns := trainNs.Load()
		return time.Unix(0, ns), ns != 0
	}
	var slow atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /predict/bulk/strict", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		first.CompareAndSwap(0, now.UnixNano())
		if now.After(time.Unix(0, first.Load()).Add(trainAfter)) {
			trainNs.CompareAndSwap(0, now.UnixNano())
		}
		if trainAt, ok := training(); ok && !now.Before(trainAt) && now.Before(trainAt.Add(trainFor)) {
			slow.Add(1)
			time.Sleep(slowFor)
		}
		w.Write([]byte(`{"predictions":[` + strings.Repeat(`{"ttft_ms":1},`, 9) + `{"ttft_ms":1}]}`))
	})
	longAgo := time.Now().Add(-time.Hour)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		loaded := longAgo
		if trainAt, ok := training(); ok && time.Now().After(trainAt.Add(loadAfter)) {
			loaded = trainAt.Add(loadAfter)
		}
		fmt.Fprintf(w, "headroom_predictor_bundle_loaded_timestamp_seconds %.3f\n", float64(loaded.UnixMilli())/1000)
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		runs, attempt := 0, longAgo
		if trainAt, ok := training(); ok && time.Now().After(trainAt.Add(trainFor)) {
			runs, attempt = 1, trainAt
		}
		fmt.Fprintf(w, `{"training":{"ttft":{"runs":%d,"last_attempt":%q,"last_duration_seconds":%g}}}`,
			runs, attempt.UTC().Format(time.RFC3339Nano), trainFor.Seconds())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	sum, err := Run(context.Background(), Config{PredictorURL: srv.URL, TrainerURL: srv.URL, Rate: 200,
		Duration: 3 * time.Second, Warmup: time.Nanosecond, Rows: 10, Concurrency: 32, ScrapeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 0 {
		t.Fatalf("errors %v", sum.ErrorKinds)
	}
	bs := sum.Busy
	if bs == nil {
		t.Fatal("no busy summary")
	}
	if bs.Training.Spans != 1 || bs.Swaps.Spans != 1 {
		t.Errorf("%d training runs, %d swaps; want 1 and 1", bs.Training.Spans, bs.Swaps.Spans)
	}
	// The two spans, each widened by busyLead and busyTail, overlap into
	// [−busyLead, loadAfter + busyTail] around the training's start.
	if want := (loadAfter + busyTail + busyLead).Seconds(); math.Abs(bs.Seconds-want) > 0.01 {
		t.Errorf("busy %v s, want %v", bs.Seconds, want)
	}
	slowMs := float64(slowFor.Milliseconds())
	if slow.Load() == 0 || bs.Training.MaxMs < slowMs || bs.Outside.P90Ms >= slowMs || bs.Swaps.P90Ms >= slowMs {
		t.Errorf("%d slow answers of %v ms; training max %v ms, outside p90 %v ms, swaps p90 %v ms: "+
			"the slow ones belong to the training side", slow.Load(), slowMs, bs.Training.MaxMs, bs.Outside.P90Ms, bs.Swaps.P90Ms)
	}
	var text strings.Builder
	if err := sum.WriteText(&text); err != nil || !strings.Contains(text.String(), "p99 busy / outside") {
		t.Errorf("text summary: %v\n%s", err, text.String())
	}
}

// Combine reports each busy figure as the median over the runs that have
// it, counts as totals, and the ratio as the median of the runs' own.
func TestCombineBusy(t *testing.T) {
	run := func(busyP99, outsideP99, swapP99 float64, swaps int) *Summary {
		bs := &BusySummary{Seconds: 2, Requests: 100, Latency: Latency{P99Ms: busyP99}, Outside: Latency{P99Ms: outsideP99},
			P99Ratio: busyP99 / outsideP99, Training: BusyPart{Spans: 2, Seconds: 1.5, Requests: 80, Latency: Latency{P99Ms: busyP99}}}
		if swaps > 0 {
			bs.Swaps = BusyPart{Spans: swaps, Seconds: 0.5, Requests: 20, Latency: Latency{P99Ms: swapP99}}
		}
		return &Summary{TargetRPS: 1, Busy: bs}
	}
	c := Combine([]*Summary{run(4, 2, 3, 1), run(9, 3, 0, 0), run(5, 4, 5, 1), {TargetRPS: 1}})
	bs := c.Busy
	if bs == nil {
		t.Fatal("no combined busy summary")
	}
	if bs.P99Ratio != 2 || bs.P99Ms != 5 || bs.Outside.P99Ms != 3 {
		t.Errorf("ratio %v, p99 %v / %v; want the medians 2, 5 / 3", bs.P99Ratio, bs.P99Ms, bs.Outside.P99Ms)
	}
	if bs.Requests != 300 || bs.Seconds != 6 || bs.Training.Spans != 6 || bs.Swaps.Spans != 2 || bs.Swaps.Requests != 40 {
		t.Errorf("totals %+v", bs)
	}
	// The run without swaps does not pull their median to 0.
	if bs.Swaps.P99Ms != 4 {
		t.Errorf("swap p99 %v, want 4, the median of the two runs that had swaps", bs.Swaps.P99Ms)
	}
}
