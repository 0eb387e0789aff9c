package trainer

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/store"
	"github.com/headroomhq/headroom/trainer/fit"
	"github.com/headroomhq/headroom/wire"
)

// fuzzBatchEntries bounds how much of the store one fuzzed batch may be: a
// tenth of the clean samples. More than that is a workload change, which
// the gate lets through on purpose (a drift the live samples show).
const fuzzBatchEntries = 30

// FuzzIngestThenGate puts a fuzzed training upload through the path a real
// one takes (the wire decoder, the store, a retrain, the publication gate)
// beside 300 clean samples of both targets, and checks that the model in
// service afterwards is never worse than the gate allows: its predictions
// on clean rows and over its feature ranges are finite, positive and within
// the believable band, and its MAPE on clean held-out rows is within the
// gate's rule of the model served before the batch.
func FuzzIngestThenGate(f *testing.F) {
	e := func(ttft, tpot string, extra ...string) string {
		s := `{"kv_cache_percentage":0.3,"input_token_length":500,"num_request_waiting":0,"num_request_running":7,` +
			`"num_tokens_generated":10,"prefix_cache_score":0,"actual_ttft_ms":` + ttft + `,"actual_tpot_ms":` + tpot
		for i := 0; i+1 < len(extra); i += 2 {
			s += `,"` + extra[i] + `":` + extra[i+1]
		}
		return s + "}"
	}
	transfer := func(ms, tokens, zone string) []string {
		return []string{"actual_kv_transfer_ms", ms, "kv_transfer_tokens", tokens,
			"prefill_topology", `{"node":"n0","rack":"r0","zone":"zone-a"}`,
			"decode_topology", `{"node":"n1","rack":"r0","zone":"` + zone + `"}`, "concurrent_transfers", "2"}
	}
	many := func(n int, entry string) string { return strings.TrimSuffix(strings.Repeat(entry+",", n), ",") }
	for _, s := range []string{
		`{"entries":[` + e("55", "12") + `]}`,
		`{"entries":[` + e("55", "1e-6") + `]}`,         // issue 11 row 2
		`{"entries":[` + e("1e-300", "12") + `]}`,       // row 3
		`{"entries":[` + e("5e-324", "5e-324") + `]}`,   // subnormal
		`{"entries":[` + e("3600000", "3600000") + `]}`, // the ceiling
		`{"entries":[` + many(30, e("0.001", "0.001")) + `]}`,
		`{"entries":[` + many(30, e("3000000", "1")) + `]}`,
		`{"entries":[` + e("55", "12", "timestamp", `"9999-12-31T23:59:59Z"`) + `,` + e("56", "13") + `]}`, // row 1
		`{"entries":[` + e("55", "12", "input_token_length", "100000000") + `]}`,
		`{"entries":[` + e("55", "12", "num_request_running", "100000000", "prefill_tokens_in_flight", "100000000") + `]}`,
		`{"entries":[` + e("NaN", "Infinity") + `]}`,
		`[` + e("55", "12") + `]`,
		// Disaggregated requests: transfers, some absurd.
		`{"entries":[` + many(12, e("55", "0", transfer("3.5", "400", "zone-b")...)) + `]}`,
		`{"entries":[` + many(30, e("3000000", "0", transfer("2999999", "500", "zone-a")...)) + `]}`,
		`{"entries":[` + many(30, e("0", "0", transfer("1e-300", "1", "zone-a")...)) + `]}`,
	} {
		f.Add([]byte(s))
	}
	rng := rand.New(rand.NewPCG(11, 12))
	clean := gateFuzzSamples(rng, 300)
	eval := gateFuzzSamples(rng, 300)

	f.Fuzz(func(t *testing.T, body []byte) {
		samples, _, errs := wire.DecodeTrainingBulk(body, 0)
		if len(errs) > 0 || len(samples) == 0 {
			return
		}
		samples = samples[:min(len(samples), fuzzBatchEntries)]

		db, err := store.Open(filepath.Join(t.TempDir(), "samples.db"), store.Options{NoSync: true, HoldoutSpread: 1}.ForReplay())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tr, err := New(Config{MinSamples: 1}, db) // linear only: fast
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Add(clean); err != nil {
			t.Fatal(err)
		}
		first, err := tr.Retrain(context.Background())
		if err != nil || first == nil {
			t.Fatalf("first bundle: %v %v", first, err)
		}
		now := time.Now().UTC()
		for i := range samples {
			if samples[i].Timestamp.IsZero() {
				samples[i].Timestamp = now
			}
		}
		if _, err := db.Add(samples); err != nil {
			t.Fatalf("the store refused what the decoder accepted: %v", err)
		}
		tr.ObserveServed(samples)
		if _, err := tr.Retrain(context.Background()); err != nil {
			t.Fatalf("retrain after the batch: %v", err)
		}
		served := tr.Current()
		g := tr.cfg.Gate
		if m := served.Bundle.Transfer; m != nil {
			for c := range features.NumLinkClasses {
				for _, tokens := range []int64{0, 1, 500, 1 << 20} {
					if p, ok := m.Predict(c, tokens, 0, 1); ok && (!(p > 0) || math.IsInf(p, 0) || p > m.MaxMs) {
						t.Fatalf("the transfer model in service predicts %v ms for %d tokens over %s", p, tokens, c)
					}
				}
			}
		}
		for _, tg := range features.PodTargets {
			before, after := first.Bundle.Target(tg), served.Bundle.Target(tg)
			if after == nil {
				t.Fatalf("%s: no model in service", tg)
			}
			band := fit.NewLabelBand(labelsOf(clean, tg))
			lo, hi := band.Lo/g.PredictionBand, band.Hi*g.PredictionBand
			var buf []float64
			rows := make([][]float64, 0, len(eval))
			for i := range eval {
				rows = append(rows, append([]float64(nil), after.Schema().Build(&eval[i].Row, buf[:0])...))
			}
			for _, x := range append(rows, probeGrid(after.Ranges)...) {
				if p := after.Predict(x); !(p > 0) || math.IsInf(p, 0) || p < lo || p > hi {
					t.Fatalf("%s: the model in service predicts %v ms at %v, outside [%v, %v]", tg, p, x, lo, hi)
				}
			}
			if after == before {
				continue
			}
			pod := &podModels{tg: tg}
			was, _ := mapeOf(pod.predict(before, eval))
			now, _ := mapeOf(pod.predict(after, eval))
			if g.muchWorse(now, was) {
				v := tr.Status().Targets[tg.String()].Gate
				t.Fatalf("%s: MAPE on clean rows went from %.1f%% to %.1f%% after %d fuzzed entries; verdict %+v",
					tg, was, now, len(samples), v)
			}
		}
	})
}

// gateFuzzSamples are samples of both targets with a plausible shape: TTFT
// grows with the prompt and the load, TPOT with the load.
func gateFuzzSamples(rng *rand.Rand, n int) []features.Sample {
	s := make([]features.Sample, n)
	for i := range s {
		row := features.Row{
			KVCachePercentage: rng.Float64() * 0.8, InputTokenLength: int64(16 + rng.IntN(4000)),
			NumRequestRunning: int64(rng.IntN(40)), NumRequestWaiting: int64(rng.IntN(4)),
			NumTokensGenerated: int64(rng.IntN(500)),
		}
		noise := func() float64 { return math.Exp(0.1 * rng.NormFloat64()) }
		s[i] = features.Sample{Row: row,
			ActualTTFTMs: (15 + 0.04*float64(row.InputTokenLength) + 1.5*float64(row.NumRequestRunning)) * noise(),
			ActualTPOTMs: (8 + 0.3*float64(row.NumRequestRunning)) * noise(),
			Timestamp:    time.Unix(1_800_000_000+int64(i), 0).UTC(),
		}
	}
	return s
}
