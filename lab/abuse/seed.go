package abuse

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/lab/loadgen"
	"github.com/headroomhq/headroom/wire"
)

// Seed posts n generated samples to the trainer, one in four of them a
// split request's with a KV transfer between the pods of pairsRequest's
// fleet, and waits until the predictor serves a bundle with a TTFT, a TPOT
// and a transfer model: what the scenarios need to be answered in full.
func Seed(ctx context.Context, c Config, n int64) error {
	if _, err := loopback("trainer URL", c.TrainerURL); err != nil {
		return err
	}
	if _, err := loopback("predictor URL", c.PredictorURL); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	hc := client()
	if err := postGenerated(ctx, hc, c.TrainerURL, c.Token, 0, n); err != nil {
		return err
	}
	fmt.Fprintf(c.Log, "seeded %d samples; waiting for a bundle with every model\n", n)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, err := servesEveryModel(hc, c.PredictorURL, c.Token)
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("seed: the predictor serves no bundle with TTFT, TPOT and transfer models after 2 minutes (%v)", err)
		}
		sleep(ctx, 500*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// postGenerated posts samples first .. first+n-1 of seedSample to the
// trainer, a thousand a request.
func postGenerated(ctx context.Context, hc *http.Client, trainerURL, token string, first, n int64) error {
	return postScaled(ctx, hc, trainerURL, token, first, n, 1)
}

// postScaled is postGenerated with every TTFT times ttftFactor: the fleet
// after a real drift.
func postScaled(ctx context.Context, hc *http.Client, trainerURL, token string, first, n int64, ttftFactor float64) error {
	gen := loadgen.Generator{Seed: 11}
	const batch = 1000
	for lo := first; lo < first+n; lo += batch {
		samples := make([]features.Sample, 0, batch)
		for i := lo; i < min(lo+batch, first+n); i++ {
			s := seedSample(gen, i)
			s.ActualTTFTMs *= ttftFactor
			samples = append(samples, s)
		}
		body := wire.AppendTrainingRequest(nil, samples)
		status, _, err := post(ctx, hc, trainerURL+"/add_training_data_bulk", token, body)
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("seed: ingest answered %d", status)
		}
	}
	return nil
}

// seedSample is sample i of gen, every fourth with a KV transfer whose
// time follows a bandwidth per link class.
func seedSample(gen loadgen.Generator, i int64) features.Sample {
	s := gen.Sample(i)
	s = features.Sample{Row: s.Row, ActualTTFTMs: s.ActualTTFTMs, ActualTPOTMs: s.ActualTPOTMs}
	if i%4 != 0 {
		return s
	}
	p, d := int(i/4)%64, 64+int(i/8)%64
	topo := func(n int) features.Topology {
		return features.Topology{Node: fmt.Sprintf("n%d", n), Rack: fmt.Sprintf("r%d", n%8), Zone: fmt.Sprintf("z%d", n%2), Region: "eu"}
	}
	tr := &features.Transfer{Tokens: max(s.Row.InputTokenLength, 1), BytesPerToken: 131072,
		PrefillPod: fmt.Sprintf("p-%d", p), DecodePod: fmt.Sprintf("d-%d", d-64), Prefill: topo(p), Decode: topo(d), Concurrent: 1}
	bandwidth := map[features.LinkClass]float64{features.SameRack: 40e9, features.SameZone: 20e9}[tr.Class()]
	if bandwidth == 0 {
		bandwidth = 5e9
	}
	tr.Ms = 0.2 + 1000*float64(tr.Tokens)*tr.BytesPerToken/bandwidth
	s.Transfer = tr
	return s
}

// servesEveryModel reports whether the predictor's bundle has all three
// models.
func servesEveryModel(hc *http.Client, predictorURL, token string) (bool, error) {
	var st struct {
		Models map[string]bool `json:"models_exist"`
	}
	if err := getJSON(hc, predictorURL+"/status", token, &st); err != nil {
		return false, err
	}
	m := st.Models
	return m["ttft_model"] && m["tpot_model"] && m["kv_transfer_model"], nil
}
