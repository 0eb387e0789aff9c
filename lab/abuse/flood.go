package abuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/loadgen"
	"github.com/headroomhq/headroom/wire"
)

// pairsFlood: Clients (32) post Candidates × Candidates (64 × 64)
// /predict/pairs requests back to back for the Duration, asking for K
// pairs (0: saying nothing, as a careless client does), beside the
// router's 10-row hot path. A 26 KB 64 × 64 request answered all 4,096
// pairs, 1.97 MB, at 56 times the CPU of a 1 × 1, and 32 such clients
// moved the hot path's p99 from 0.87 to 319 ms (issue 26). The figure is
// the hot path's p99, held to 50 ms.
func pairsFlood(ctx context.Context, c Config) (*Result, error) {
	if _, err := loopback("predictor URL", c.PredictorURL); err != nil {
		return nil, err
	}
	n := orDefault(c.Candidates, 64)
	body := wire.AppendPairsRequest(nil, pairsRequest(n, c.K))
	return flood(ctx, c, "pairs-flood", c.PredictorURL+"/predict/pairs", body,
		fmt.Sprintf("%d x %d pairs (%d bytes), k %d", n, n, len(body), c.K))
}

// bulkFlood: Clients (32) post Rows-row (10,000) /predict/bulk/strict
// requests back to back beside the hot path: the same amplification as
// pairs, through the router's own route.
func bulkFlood(ctx context.Context, c Config) (*Result, error) {
	if _, err := loopback("predictor URL", c.PredictorURL); err != nil {
		return nil, err
	}
	rows := orDefault(c.Rows, 10000)
	body := loadgen.AppendPredictBody(nil, loadgen.Generator{Seed: 4}, 0, rows)
	return flood(ctx, c, "bulk-flood", c.PredictorURL+"/predict/bulk/strict", body,
		fmt.Sprintf("%d rows (%d bytes)", rows, len(body)))
}

// flood posts body to url from Clients (32) clients back to back, beside
// the hot path, whose p99 it holds to 50 ms.
func flood(ctx context.Context, c Config, name, url string, body []byte, what string) (*Result, error) {
	clients := orDefault(c.Clients, 32)
	fmt.Fprintf(c.Log, "%s: %d clients posting %s back to back for %s\n", name, clients, what, c.Duration)
	r := &Result{Scenario: name, Counts: map[string]int{}}
	var mu sync.Mutex
	var answered int
	var bytesIn int64
	count := func(k string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		r.Counts[k]++
		if k == "hostile: status 200" {
			answered++
			bytesIn += n
		}
	}
	start := time.Now()
	err := alongside(ctx, c, c.PredictorURL, 0, func(ctx context.Context) {
		target, err := loopback("predictor URL", c.PredictorURL)
		if err != nil {
			return
		}
		var wg sync.WaitGroup
		for i := range clients {
			hc := &http.Client{Timeout: 10 * time.Second,
				Transport: &http.Transport{DialContext: hostileDialer(c, target, i).DialContext}}
			wg.Go(func() {
				for ctx.Err() == nil {
					status, n, err := post(ctx, hc, url, c.Token, body)
					switch {
					case ctx.Err() != nil:
					case err != nil:
						count("hostile: "+errorKind(err), 0)
						sleep(ctx, 100*time.Millisecond)
					default:
						count("hostile: status "+strconv.Itoa(status), n)
						if status != http.StatusOK {
							sleep(ctx, 10*time.Millisecond) // refused at once: do not spin
						}
					}
				}
			})
		}
		wg.Wait()
	}, r, hotPathBeside(c, 50))
	secs := time.Since(start).Seconds()
	r.add("hostile answers a second", float64(answered)/secs, "/s")
	if answered > 0 {
		r.add("hostile answer size", float64(bytesIn)/float64(answered)/1e3, "KB")
	}
	return r, err
}

// post sends body and reads the whole answer, returning its status and
// length.
func post(ctx context.Context, hc *http.Client, url, token string, body []byte) (int, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n, err
}

// pairsRequest is a request with n prefill and n decode candidates, pods
// of a fleet over two zones, their rows from the generator.
func pairsRequest(n, k int) *wire.PairsRequest {
	gen := loadgen.Generator{Seed: 5}
	req := &wire.PairsRequest{InputTokenLength: 2048, K: k}
	for i := range 2 * n {
		s := gen.Sample(int64(i))
		row := s.Row
		row.InputTokenLength, row.NumTokensGenerated, row.EncoderInputSize, row.PodType = 0, 0, 0, ""
		cand := wire.PairCandidate{Row: row, Topology: features.Topology{
			Node: fmt.Sprintf("n%d", i), Rack: fmt.Sprintf("r%d", i%8), Zone: fmt.Sprintf("z%d", i%2), Region: "eu"}}
		if i < n {
			cand.Pod = fmt.Sprintf("p-%d", i)
			req.Prefill = append(req.Prefill, cand)
		} else {
			cand.Pod = fmt.Sprintf("d-%d", i-n)
			req.Decode = append(req.Decode, cand)
		}
	}
	return req
}
