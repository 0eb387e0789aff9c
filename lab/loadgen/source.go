package loadgen

import (
	"math"
	"math/rand/v2"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/wire"
)

// Source yields the sample with a given index: what the router knows about
// an endpoint when it asks for a prediction and, for ingestion, the
// latencies it then measured. Implementations are deterministic and safe
// for concurrent use, so a run is repeatable and workers can build bodies
// without coordination.
type Source interface {
	Sample(i int64) features.Sample
}

// Trace replays recorded samples (read with package trace) in order,
// wrapping around at the end.
type Trace []features.Sample

// Sample returns t[i mod len(t)].
func (t Trace) Sample(i int64) features.Sample { return t[i%int64(len(t))] }

// Generator makes synthetic samples: a chat-like mix of prompt lengths on
// servers at every KV-cache and prefix-cache level, so ingestion spreads
// over all of the store's KV × prefix buckets. Labels follow a plausible
// latency shape with noise, with enough structure that trained models grow
// real trees. Sample i is a pure function of (Seed, i).
type Generator struct {
	Seed uint64
}

// Sample returns the i-th synthetic sample. Like the router's own load-test
// client, labels cycle: a TTFT-only sample, a TPOT-only sample, then one
// with both.
func (g Generator) Sample(i int64) features.Sample {
	var p rand.PCG
	p.Seed(g.Seed, uint64(i))
	u := func() float64 { return float64(p.Uint64()>>11) / (1 << 53) }
	kv := u()
	prefix := u()
	input := int64(math.Exp(math.Log(16) + u()*math.Log(8192.0/16)))
	running := 1 + int64(kv*48*u())
	var waiting int64
	if u() < kv {
		waiting = int64(u() * 12 * kv)
	}
	prefillTIF := int64(float64(running) * u() * 600)
	decodeTIF := running * int64(64+u()*900)
	effective := (1 - prefix) * float64(input)
	noise := func(sd float64) float64 {
		// Sum of three uniforms: roughly normal, cheap, bounded.
		return math.Exp(sd * (u() + u() + u() - 1.5) * 2)
	}
	// Interactions and thresholds no line over the features can follow
	// (queueing multiplies the prefill; a nearly full KV cache preempts;
	// a batch past 32 sequences takes a slower kernel), so trained models
	// need their trees, as on real servers.
	ttft := (18 + 0.045*effective + 0.004*float64(prefillTIF)) * (1 + 0.2*float64(waiting))
	tpot := (6 + 0.22*float64(running)) * (1 + 0.4*kv*kv)
	if kv > 0.85 {
		ttft *= 1.6
		tpot *= 1.3
	}
	if running > 32 {
		tpot *= 1.25
	}
	e := features.Sample{
		Row: features.Row{
			KVCachePercentage:     kv,
			InputTokenLength:      input,
			NumRequestWaiting:     waiting,
			NumRequestRunning:     running,
			PrefixCacheScore:      prefix,
			PrefillTokensInFlight: prefillTIF,
			DecodeTokensInFlight:  decodeTIF,
		},
		ActualTTFTMs: ttft * noise(0.15),
		ActualTPOTMs: tpot * noise(0.08),
	}
	switch i % 3 {
	case 0:
		e.ActualTPOTMs = 0
	case 1:
		e.ActualTTFTMs = 0
	}
	return e
}

// AppendPredictBody appends {"requests":[...]} with the rows of samples
// first .. first+n-1 of src, written as the router's client writes them
// (package wire: its field order, no labels).
func AppendPredictBody(dst []byte, src Source, first int64, n int) []byte {
	dst = append(dst, `{"requests":[`...)
	for k := range n {
		if k > 0 {
			dst = append(dst, ',')
		}
		s := src.Sample(first + int64(k))
		dst = wire.AppendRow(dst, &s.Row)
	}
	return append(dst, "]}"...)
}

// AppendIngestBody appends {"entries":[...]} with samples first ..
// first+n-1 of src, for /add_training_data_bulk: each row with its labels
// only, as the router reports a finished request. A trace's timestamps and
// served predictions are left out; the trainer stamps what it receives.
func AppendIngestBody(dst []byte, src Source, first int64, n int) []byte {
	dst = append(dst, `{"entries":[`...)
	for k := range n {
		if k > 0 {
			dst = append(dst, ',')
		}
		s := src.Sample(first + int64(k))
		labelled := features.Sample{Row: s.Row, ActualTTFTMs: s.ActualTTFTMs, ActualTPOTMs: s.ActualTPOTMs}
		dst = wire.AppendEntry(dst, &labelled)
	}
	return append(dst, "]}"...)
}
