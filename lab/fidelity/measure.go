package fidelity

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/gonum/stat"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

// The metrics compared, per stage. Latencies are in milliseconds,
// throughput in successful requests per second.
const (
	TTFTMean     = "ttft_mean"
	TTFTP90      = "ttft_p90"
	TTFTP99      = "ttft_p99"
	PerTokenMean = "per_token_mean"
	PerTokenP90  = "per_token_p90"
	E2EMean      = "e2e_mean"
	E2EP90       = "e2e_p90"
	Throughput   = "throughput"
	// Failures is the requests that failed (timed out or were refused), a
	// row only where there were any.
	Failures = "failures"
	// TTFTPerRequest and E2EPerRequest compare an engine log request by
	// request: their error is the median over requests of each request's
	// error.
	TTFTPerRequest = "ttft_per_request"
	E2EPerRequest  = "e2e_per_request"
)

// Metrics are the stage metrics, in the table's order.
var Metrics = []string{TTFTMean, TTFTP90, TTFTP99, PerTokenMean, PerTokenP90, E2EMean, E2EP90, Throughput}

// Stage is one load stage's figures as the tool reports them.
type Stage struct {
	Requests  int
	Successes int
	Failures  int
	Values    map[string]float64 // by metric
}

// Measurement is what a tool measured of a run, or what a simulator
// predicts it would: per stage, and for an engine log per request (in the
// log's order).
type Measurement struct {
	Stages   []Stage
	Requests []RequestTimes
}

// RequestTimes is one request as an engine log records it, in
// milliseconds from its queued time.
type RequestTimes struct {
	TTFTMs, E2EMs float64
}

// Latencies of one request as a client measures them, in milliseconds;
// OK false for a request that failed.
type latency struct {
	ttft, e2e, perToken float64
	ok                  bool
}

// stageOf computes a stage's figures from its requests' latencies the way
// inference-perf does: distributions over the successful requests
// (quantiles interpolated, as numpy's), per-token time as (E2E − TTFT) /
// (output tokens − 1) for each request (inference-perf's own
// time_per_output_token divides by its timeline's entries, two per token,
// so it is about half this), and throughput as the successes over the time
// from the first send to the last success. window is that time, seconds.
func stageOf(ls []latency, window float64) Stage {
	s := Stage{Requests: len(ls), Values: make(map[string]float64)}
	var ttft, e2e, tok []float64
	for _, l := range ls {
		if !l.ok {
			s.Failures++
			continue
		}
		s.Successes++
		ttft, e2e = append(ttft, l.ttft), append(e2e, l.e2e)
		if !math.IsNaN(l.perToken) {
			tok = append(tok, l.perToken)
		}
	}
	s.Values[TTFTMean], s.Values[TTFTP90], s.Values[TTFTP99] = meanOf(ttft), quantile(ttft, 0.9), quantile(ttft, 0.99)
	s.Values[E2EMean], s.Values[E2EP90] = meanOf(e2e), quantile(e2e, 0.9)
	s.Values[PerTokenMean], s.Values[PerTokenP90] = meanOf(tok), quantile(tok, 0.9)
	s.Values[Throughput] = math.NaN()
	if window > 0 {
		s.Values[Throughput] = float64(s.Successes) / window
	}
	s.Values[Failures] = float64(s.Failures)
	return s
}

// meanOf is v's mean, NaN when empty.
func meanOf(v []float64) float64 { return stat.Mean(v, nil) }

// quantile is numpy's default (linear) quantile q of v; v is sorted in place.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return sim.Quantile(v, q)
}

// inference-perf's lifecycle metrics file, the parts read here: times in
// seconds.
type lifecycle struct {
	LoadSummary struct {
		Count int `json:"count"`
	} `json:"load_summary"`
	Successes struct {
		Count   int `json:"count"`
		Latency struct {
			TTFT distribution `json:"time_to_first_token"`
			E2E  distribution `json:"request_latency"`
			TPOT distribution `json:"time_per_output_token"`
		} `json:"latency"`
		Throughput struct {
			RequestsPerSec float64 `json:"requests_per_sec"`
		} `json:"throughput"`
	} `json:"successes"`
	Failures struct {
		Count int `json:"count"`
	} `json:"failures"`
}

type distribution struct {
	Mean float64 `json:"mean"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// readStageMetrics reads inference-perf's stage_N_lifecycle_metrics.json
// for n stages. Per-token time is (E2E mean − TTFT mean)/(outputLen − 1)
// with the configured output length (every request generates exactly
// that many tokens; inference-perf's own count, re-tokenised text, can be
// short), and its p90 twice inference-perf's time_per_output_token p90
// (two timeline entries per token).
func readStageMetrics(dir string, n, outputLen int) (Measurement, error) {
	var m Measurement
	for k := range n {
		path := filepath.Join(dir, fmt.Sprintf("stage_%d_lifecycle_metrics.json", k))
		data, err := os.ReadFile(path)
		if err != nil {
			return Measurement{}, err
		}
		var l lifecycle
		if err := json.Unmarshal(data, &l); err != nil {
			return Measurement{}, fmt.Errorf("%s: %w", path, err)
		}
		lat := l.Successes.Latency
		s := Stage{Requests: l.LoadSummary.Count, Successes: l.Successes.Count, Failures: l.Failures.Count,
			Values: map[string]float64{
				TTFTMean: 1e3 * lat.TTFT.Mean, TTFTP90: 1e3 * lat.TTFT.P90, TTFTP99: 1e3 * lat.TTFT.P99,
				E2EMean: 1e3 * lat.E2E.Mean, E2EP90: 1e3 * lat.E2E.P90,
				PerTokenMean: math.NaN(), PerTokenP90: 2e3 * lat.TPOT.P90,
				Throughput: l.Successes.Throughput.RequestsPerSec, Failures: float64(l.Failures.Count),
			}}
		if outputLen > 1 {
			s.Values[PerTokenMean] = 1e3 * (lat.E2E.Mean - lat.TTFT.Mean) / float64(outputLen-1)
		}
		m.Stages = append(m.Stages, s)
	}
	return m, nil
}

// readEngineLog reads an engine log's timestamps: TTFT is first token −
// queued, E2E last token − queued, per-token time (last − first)/(output −
// 1), on the engine's clock. (arrival_time is on another clock and is never
// subtracted from them.)
func readEngineLog(path string) (Measurement, error) {
	f, err := os.Open(path)
	if err != nil {
		return Measurement{}, err
	}
	defer f.Close()
	var ls []latency
	var m Measurement
	first, last := math.Inf(1), math.Inf(-1)
	err = workload.ScanJSONL(f, func(line int, text []byte) error {
		var r struct {
			OutputToks int      `json:"output_toks"`
			Queued     *float64 `json:"queued_ts"`
			FirstToken *float64 `json:"first_token_ts"`
			LastToken  *float64 `json:"last_token_ts"`
		}
		if err := json.Unmarshal(text, &r); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if r.Queued == nil || r.FirstToken == nil || r.LastToken == nil {
			// A request without its timestamps did not complete.
			ls = append(ls, latency{})
			m.Requests = append(m.Requests, RequestTimes{TTFTMs: math.NaN(), E2EMs: math.NaN()})
			return nil
		}
		l := latency{ttft: 1e3 * (*r.FirstToken - *r.Queued), e2e: 1e3 * (*r.LastToken - *r.Queued), perToken: math.NaN(), ok: true}
		if r.OutputToks > 1 {
			l.perToken = 1e3 * (*r.LastToken - *r.FirstToken) / float64(r.OutputToks-1)
		}
		first, last = min(first, *r.Queued), max(last, *r.LastToken)
		ls = append(ls, l)
		m.Requests = append(m.Requests, RequestTimes{TTFTMs: l.ttft, E2EMs: l.e2e})
		return nil
	})
	if err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", path, err)
	}
	m.Stages = []Stage{stageOf(ls, last-first)}
	return m, nil
}
