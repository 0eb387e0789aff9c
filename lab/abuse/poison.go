package abuse

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/loadgen"
	"github.com/headroomhq/headroom/wire"
)

// A poisoning is one client's samples whose TTFT is wrong, sent beside the
// router's own: in a burst, spread over uploads and addresses, as one
// row's copies, or resent by a retry loop. Each was a way to buy the
// model in service (issue 26): 500 rows of TTFT x 20 were published 2 s
// later (clean MAPE 11.3% to 340.9%); 50 rows a step of TTFT x 3 on
// prompts over 300 tokens, at 350 rows (74%); 1,000 copies of one row
// evicted the whole holdout (87.8%). The figure is the served model's
// MAPE on clean rows, the worst seen while the poisoning and the retrains
// after it run, held to 1.5 x its value before.
type poisoning struct {
	factor    float64 // the poisoned rows' TTFT is the true one times factor
	minPrompt int64   // only rows with longer prompts are sent (0: any)
	rows      int     // rows an upload
	copies    bool    // an upload is one row, rows times
	resend    bool    // every upload is the first one again (a retry loop)
	uploads   int     // uploads in all (0: until the Duration ends)
	every     time.Duration
	addrs     int // hostile addresses the uploads come from in turn, unless Config.HostileAddrs says (0: one)
	// drift, instead of a client's poison, is a real drift: every TTFT
	// of the router's own samples, and of the clean rows measured, times
	// factor from the start on.
	drift bool
}

var poisonings = map[string]poisoning{
	"burst-x20":     {factor: 20, rows: 500, uploads: 1},
	"burst-slow-x3": {factor: 3, minPrompt: 300, rows: 50, every: 5 * time.Second},
	"holdout-flood": {factor: 20, rows: 1000, copies: true, uploads: 1},
	"burst-spread":  {factor: 20, rows: 20, uploads: 25, every: 2 * time.Second, addrs: 5},
	"retry-loop":    {factor: 20, rows: 100, resend: true, uploads: 30, every: time.Second},
	"drift-x2":      {factor: 2, drift: true},
}

// cleanRows is how many clean rows the served model is measured on.
const cleanRows = 3000

func poison(name string) func(ctx context.Context, c Config) (*Result, error) {
	return func(ctx context.Context, c Config) (*Result, error) {
		return poisoningRun(ctx, c, name, poisonings[name])
	}
}

func poisoningRun(ctx context.Context, c Config, name string, p poisoning) (*Result, error) {
	target, err := loopback("trainer URL", c.TrainerURL)
	if err != nil {
		return nil, err
	}
	if _, err := loopback("predictor URL", c.PredictorURL); err != nil {
		return nil, err
	}
	hc := client()
	r := &Result{Scenario: name, Counts: map[string]int{}}
	// Clean rows the seed never sent: the served model's MAPE on them.
	gen := loadgen.Generator{Seed: 11}
	clean := make([]features.Sample, 0, cleanRows)
	for i := int64(1 << 30); len(clean) < cleanRows; i++ {
		if s := gen.Sample(i); s.ActualTTFTMs > 0 {
			clean = append(clean, s)
		}
	}
	before, _, widthBefore, err := cleanMAPE(ctx, hc, c, clean)
	if err != nil {
		return nil, err
	}
	factor := 1.0
	if p.drift {
		// From now on the fleet is slower: the rows measured are too.
		factor = p.factor
		for i := range clean {
			clean[i].ActualTTFTMs *= factor
		}
	}
	version, _ := servedVersion(hc, c.PredictorURL, c.Token)
	fmt.Fprintf(c.Log, "%s: clean TTFT MAPE %.1f%% served (bundle v%d) before, upper bound %.2f x the prediction (median)\n",
		name, before, version, widthBefore)

	ctx, cancel := context.WithTimeout(ctx, c.Duration)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	// The poison comes from the hostile addresses in turn, an upload each;
	// c is settled here, before the goroutines below read it.
	if c.HostileAddrs <= 0 {
		c.HostileAddrs = max(p.addrs, 1)
	}
	// The router's own samples go on beside the poison, from 127.0.0.1.
	if rate := orDefault(c.SampleRate, 20); c.SampleRate >= 0 || p.drift {
		wg.Go(func() {
			routerSamples(ctx, hc, c, 1<<31, rate, factor)
		})
	}
	hostile := make([]*http.Client, c.HostileAddrs)
	for i := range hostile {
		hostile[i] = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: hostileDialer(c, target, i).DialContext}}
	}
	// The uploads count their failures apart from r, which this
	// goroutine writes as it polls; they join r's once both are done.
	uploadCounts := map[string]int{}
	if !p.drift {
		wg.Go(func() {
			uploads, rows := poisonUploads(ctx, hostile, c, p, uploadCounts)
			fmt.Fprintf(c.Log, "%s: %d uploads, %d poisoned rows sent\n", name, uploads, rows)
		})
	}
	worst, lastVersion := before, version
	widest := widthBefore
	var first, last, outFirst, outLast float64 // the drift's figures
	measured := 0
	bundles := 0
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		if v, err := servedVersion(hc, c.PredictorURL, c.Token); err == nil && v != lastVersion {
			bundles++
			lastVersion = v
		}
		// The judgment now, not only at the end: a new model starts
		// its judgment afresh.
		r.Counts["shift judged "+shiftJudgment(hc, c.TrainerURL, c.Token)+" (polls)"]++
		m, out, width, err := cleanMAPE(context.Background(), hc, c, clean)
		if err != nil {
			r.Counts["clean measurements failed"]++
			continue
		}
		if measured == 0 {
			first, outFirst = m, out
		}
		last, outLast = m, out
		measured++
		worst = max(worst, m)
		widest = max(widest, width)
	}
	wg.Wait()
	for k, n := range uploadCounts {
		r.Counts[k] += n
	}
	r.Counts["bundles taken"] = bundles
	if p.drift {
		// Followed: the error on the new workload falls, and the bounds
		// widen to hold it (the reported 95% bound: a twentieth above),
		// where before every actual fell outside. How far the error falls
		// depends on how much of the old workload the store still holds.
		fmt.Fprintf(c.Log, "%s: TTFT MAPE on the new workload %.1f%% first, %.1f%% last; above the upper bound %.1f%% first, %.1f%% last; %d bundles taken\n",
			name, first, last, outFirst, outLast, bundles)
		r.add("TTFT MAPE before the drift", before, "%")
		r.add("TTFT MAPE on the new workload, first", first, "%")
		r.add("TTFT MAPE on the new workload, last", last, "%")
		r.add("above the upper bound, first", outFirst, "%")
		r.atMost("above the upper bound, last", outLast, "%", 50)
		return r, nil
	}
	fmt.Fprintf(c.Log, "%s: worst clean TTFT MAPE %.1f%%, widest upper bound %.2f x the prediction, %d bundles taken\n",
		name, worst, widest, bundles)
	r.add("clean TTFT MAPE before", before, "%")
	r.add("clean TTFT MAPE worst after", worst, "%")
	r.atMost("worst after / before", worst/before, "x", 1.5)
	// The bounds a poisoning could buy without moving the central
	// prediction: the quantile's calibration comes from the newest live
	// errors (fit.Inputs.Forward).
	r.add("upper bound / prediction before (median)", widthBefore, "x")
	r.add("upper bound / prediction widest after (median)", widest, "x")
	return r, nil
}

// poisonUploads sends p's uploads until they are all sent or ctx ends,
// and returns how many uploads and rows went; counts gets the failed ones
// by kind.
func poisonUploads(ctx context.Context, clients []*http.Client, c Config, p poisoning, counts map[string]int) (uploads, rows int) {
	gen := loadgen.Generator{Seed: 13}
	next := int64(0)
	var first []byte
	for p.uploads == 0 || uploads < p.uploads {
		body := first
		if body == nil {
			var batch []features.Sample
			for len(batch) < p.rows {
				s := gen.Sample(next)
				next++
				if s.ActualTTFTMs == 0 || s.Row.InputTokenLength <= p.minPrompt {
					continue
				}
				s = features.Sample{Row: s.Row, ActualTTFTMs: s.ActualTTFTMs * p.factor, ActualTPOTMs: s.ActualTPOTMs}
				batch = append(batch, s)
				for p.copies && len(batch) < p.rows {
					batch = append(batch, s)
				}
			}
			body = wire.AppendTrainingRequest(nil, batch)
			if p.resend {
				first = body
			}
		}
		status, _, err := post(ctx, clients[uploads%len(clients)], c.TrainerURL+"/add_training_data_bulk", c.Token, body)
		switch {
		case ctx.Err() != nil:
			return uploads, rows
		case err != nil:
			counts["poison uploads failed"]++
		case status != http.StatusAccepted:
			counts[fmt.Sprintf("poison uploads answered %d", status)]++
		default:
			uploads++
			rows += p.rows
		}
		sleep(ctx, p.every)
		if ctx.Err() != nil {
			break
		}
	}
	return uploads, rows
}

// routerSamples posts rate samples a second, from sample first of the
// seed's generator on, their TTFT times ttftFactor, until ctx ends.
func routerSamples(ctx context.Context, hc *http.Client, c Config, first int64, rate int, ttftFactor float64) {
	for i := first; ctx.Err() == nil; i += int64(rate) {
		if err := postScaled(ctx, hc, c.TrainerURL, c.Token, i, int64(rate), ttftFactor); err != nil && ctx.Err() == nil {
			fmt.Fprintf(c.Log, "router samples: %v\n", err)
		}
		sleep(ctx, time.Second)
	}
}

// cleanMAPE is the TTFT MAPE of the predictor's answers on samples, the
// percentage of samples above their upper TTFT bound, and the median
// ratio of that bound to the prediction.
func cleanMAPE(ctx context.Context, hc *http.Client, c Config, samples []features.Sample) (mape, above, width float64, err error) {
	body := []byte(`{"requests":[`)
	for i := range samples {
		if i > 0 {
			body = append(body, ',')
		}
		body = wire.AppendRow(body, &samples[i].Row)
	}
	body = append(body, "]}"...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.PredictorURL+"/predict/bulk/strict", bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("clean rows: the predictor answered %d", resp.StatusCode)
	}
	var out struct {
		Predictions []struct {
			TTFT   float64    `json:"ttft_ms"`
			Bounds [2]float64 `json:"ttft_prediction_bounds"`
		} `json:"predictions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, 0, 0, fmt.Errorf("clean rows: %w", err)
	}
	if len(out.Predictions) != len(samples) {
		return 0, 0, 0, fmt.Errorf("clean rows: %d predictions for %d rows", len(out.Predictions), len(samples))
	}
	sum, n := 0.0, 0
	ratios := make([]float64, 0, len(samples))
	for i, p := range out.Predictions {
		actual := samples[i].ActualTTFTMs
		sum += math.Abs(p.TTFT-actual) / actual
		if actual > p.Bounds[1] {
			n++
		}
		if p.TTFT > 0 {
			ratios = append(ratios, p.Bounds[1]/p.TTFT)
		}
	}
	slices.Sort(ratios)
	if len(ratios) > 0 {
		width = ratios[len(ratios)/2]
	}
	return 100 * sum / float64(len(samples)), 100 * float64(n) / float64(len(samples)), width, nil
}

// servedVersion is the version of the bundle the predictor serves.
func servedVersion(hc *http.Client, predictorURL, token string) (int, error) {
	var st struct {
		Version int `json:"model_generation"`
	}
	err := getJSON(hc, predictorURL+"/status", token, &st)
	return st.Version, err
}

// shiftJudgment is the trainer's judgment of the TTFT live error.
func shiftJudgment(hc *http.Client, trainerURL, token string) string {
	var st struct {
		Training map[string]struct {
			Live *struct {
				Shift *struct {
					Judgment string `json:"judgment"`
				} `json:"shift"`
			} `json:"live"`
		} `json:"training"`
	}
	if err := getJSON(hc, trainerURL+"/status", token, &st); err != nil {
		return "unknown"
	}
	if t, ok := st.Training["ttft"]; ok && t.Live != nil && t.Live.Shift != nil {
		return t.Live.Shift.Judgment
	}
	return "unknown"
}

func getJSON(hc *http.Client, url, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
