package loadgen

import (
	"reflect"
	"strings"
	"testing"
)

func TestCombineTakesMediansAndTotals(t *testing.T) {
	run := func(rps, p99, ingest, rss, cpu float64, errs uint64) *Summary {
		s := &Summary{TargetRPS: 100, AchievedRPS: rps, OK: 10, Requests: 10 + errs, Errors: errs,
			ErrorKinds: map[string]uint64{}, Latency: Latency{P50Ms: p99 / 2, P99Ms: p99, MaxMs: 2 * p99},
			Ingest: &IngestSummary{AckedSamplesPerS: ingest, SamplesAcked: 1000, OK: 1, Batches: 1, ErrorKinds: map[string]uint64{}},
			Server: &ServerSummary{PredictorRSSMaxMB: rss, PredictorCPUSeconds: cpu,
				TrainingRuns: map[string]int{"ttft": 1}, TrainingSeconds: map[string][]float64{"ttft": {cpu}}}}
		if errs > 0 {
			s.ErrorKinds["timeout"] = errs
		}
		return s
	}
	runs := []*Summary{run(90, 3, 40000, 20, 1, 0), run(100, 1, 60000, 25, 3, 0), run(95, 2, 50000, 22, 2, 0)}
	c := Combine(runs)
	if c.AchievedRPS != 95 || c.P99Ms != 2 || c.P50Ms != 1 || c.MaxMs != 4 {
		t.Errorf("medians: %v req/s, latency %+v", c.AchievedRPS, c.Latency)
	}
	if c.Requests != 30 || c.OK != 30 || c.Errors != 0 {
		t.Errorf("totals: requests %d ok %d errors %d", c.Requests, c.OK, c.Errors)
	}
	if c.Ingest.AckedSamplesPerS != 50000 || c.Ingest.SamplesAcked != 3000 {
		t.Errorf("ingest %+v", c.Ingest)
	}
	if c.Server.PredictorRSSMaxMB != 25 || c.Server.PredictorCPUSeconds != 2 || c.Server.TrainingRuns["ttft"] != 3 ||
		!reflect.DeepEqual(c.Server.TrainingSeconds["ttft"], []float64{1, 3, 2}) {
		t.Errorf("server %+v", c.Server)
	}
	if len(c.Runs) != 3 || runs[0].AchievedRPS != 90 {
		t.Error("Combine lost or changed the runs")
	}

	runs[1] = run(100, 1, 60000, 25, 3, 7)
	if c := Combine(runs); c.Errors != 7 || c.ErrorKinds["timeout"] != 7 || c.Requests != 37 {
		t.Errorf("errors of one run must show in the total: %d %v", c.Errors, c.ErrorKinds)
	}
	var text strings.Builder
	if err := Combine(runs).WriteText(&text); err != nil || !strings.Contains(text.String(), "median of 3 runs") {
		t.Errorf("text: %v\n%s", err, text.String())
	}
	if Combine(nil) != nil {
		t.Error("Combine of nothing is not nil")
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
