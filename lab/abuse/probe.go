package abuse

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/headroomhq/headroom/lab/loadgen"
)

// probe sends one request at a fixed rate, each on its own goroutine (an
// open loop, as the router's calls are: a slow answer does not delay the
// next call), and records every latency; a failed call (an error, a status
// other than want) counts its time too and is counted apart.
type probe struct {
	name string
	url  string
	body []byte // POSTed when set
	want int
	rate float64
	// fresh sends each call on a new connection: what a client coming back
	// after an idle minute, or after a restart, does, and what a server out
	// of descriptors cannot accept.
	fresh bool

	mu       sync.Mutex
	latency  loadgen.Histogram
	failures map[string]int
}

func (p *probe) run(ctx context.Context, hc *http.Client, token string) {
	p.failures = map[string]int{}
	if p.fresh {
		hc = &http.Client{Timeout: hc.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / p.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Go(func() {
			start := time.Now()
			status, err := p.once(hc, token)
			d := time.Since(start)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.latency.Record(d)
			switch {
			case err != nil:
				p.failures["error"]++
			case status != p.want:
				p.failures[strconv.Itoa(status)]++
			}
		})
	}
}

func (p *probe) once(hc *http.Client, token string) (int, error) {
	method, body := http.MethodGet, io.Reader(nil)
	if p.body != nil {
		method, body = http.MethodPost, bytes.NewReader(p.body)
	}
	req, err := http.NewRequest(method, p.url, body)
	if err != nil {
		return 0, err
	}
	if p.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// report adds the probe's latency and failures to r, its p99 and slowest
// call held to p99Bound and maxBound ms (0: no bound).
func (p *probe) report(r *Result, p99Bound, maxBound float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
	r.Counts[p.name+" requests"] = int(p.latency.Count())
	for k, n := range p.failures {
		r.Counts[p.name+" failed ("+k+")"] = n
	}
	r.add(p.name+" p50", durationMs(p.latency.Quantile(0.5)), "ms")
	for _, f := range []struct {
		name  string
		v     time.Duration
		bound float64
	}{{"p99", p.latency.Quantile(0.99), p99Bound}, {"max", p.latency.Max(), maxBound}} {
		if f.bound > 0 {
			r.atMost(p.name+" "+f.name, durationMs(f.v), "ms", f.bound)
		} else {
			r.add(p.name+" "+f.name, durationMs(f.v), "ms")
		}
	}
}

// failed is the number of failed probe calls.
func (p *probe) failed() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.failures {
		n += v
	}
	return n
}

// hotPath is the router's call: 10 rows to /predict/bulk/strict.
func hotPath(predictorURL string, rate float64) *probe {
	return &probe{name: "10-row strict", url: predictorURL + "/predict/bulk/strict",
		body: loadgen.AppendPredictBody(nil, loadgen.Generator{Seed: 7}, 0, 10), want: http.StatusOK, rate: rate}
}

// ingest is the router's flush of samples: 100 entries a call, each on a
// new connection.
func ingest(trainerURL string, rate float64) *probe {
	return &probe{name: "ingest", url: trainerURL + "/add_training_data_bulk",
		body: loadgen.AppendIngestBody(nil, loadgen.Generator{Seed: 8}, 0, 100), want: http.StatusAccepted, rate: rate, fresh: true}
}

// rssSampler follows a server's resident memory through its
// process_resident_memory_bytes metric.
type rssSampler struct {
	url     string
	max     float64
	samples int
}

func (s *rssSampler) run(ctx context.Context, hc *http.Client, token string, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if v, err := scrapeRSS(hc, s.url, token); err == nil {
			s.max = max(s.max, v)
			s.samples++
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scrapeRSS reads process_resident_memory_bytes from base's /metrics.
func scrapeRSS(hc *http.Client, base, token string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s/metrics: no process_resident_memory_bytes", base)
}

// mb is bytes in megabytes (10^6, as the figures).
func mb(v float64) float64 { return v / 1e6 }
