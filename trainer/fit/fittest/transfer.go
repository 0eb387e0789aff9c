// Package fittest makes samples for the tests of the fitting library and
// of the trainer that runs it.
package fittest

import (
	"math"
	"math/rand/v2"

	"github.com/headroomhq/headroom/features"
)

// Links of a made-up cluster, nearest first: bandwidth (bytes/s) and
// latency (ms).
var Links = [features.NumLinkClasses]struct{ BW, Lat float64 }{
	{360e9, 0.005}, {40e9, 0.01}, {10e9, 0.05}, {3e9, 0.5}, {0.5e9, 20},
}

// Places puts a decode pod at each link class from a prefill pod at
// Places[features.SameNode].
var Places = [features.NumLinkClasses]features.Topology{
	features.SameNode:    {Node: "n0", Rack: "r0", Zone: "a", Region: "eu"},
	features.SameRack:    {Node: "n1", Rack: "r0", Zone: "a", Region: "eu"},
	features.SameZone:    {Node: "n2", Rack: "r1", Zone: "a", Region: "eu"},
	features.CrossZone:   {Node: "n3", Rack: "r0", Zone: "b", Region: "eu"},
	features.CrossRegion: {Node: "n4", Rack: "r0", Zone: "a", Region: "us"},
}

// BytesPerToken is the KV-cache bytes per token of TransferSamples' pool.
const BytesPerToken = 160 << 10

// TransferSamples draws n transfers over the given classes with tokens in
// [lo, hi], up to 4 sharing the link equally, 5% noise, and every
// unknownEvery-th not reporting its concurrency (0: all report it).
func TransferSamples(rng *rand.Rand, n int, classes []features.LinkClass, lo, hi int64, unknownEvery int) []features.Sample {
	out := make([]features.Sample, n)
	for i := range out {
		c := classes[rng.IntN(len(classes))]
		tokens := lo + rng.Int64N(hi-lo+1)
		k := 1 + rng.Int64N(4)
		ms := Links[c].Lat + 1000*float64(tokens)*BytesPerToken/Links[c].BW*float64(k)
		ms *= math.Exp(0.05 * rng.NormFloat64())
		reported := k
		if unknownEvery > 0 && i%unknownEvery == 0 {
			reported = 0
		}
		out[i] = features.Sample{
			Row: features.Row{InputTokenLength: tokens},
			Transfer: &features.Transfer{Ms: ms, Tokens: tokens, Concurrent: reported,
				Prefill: Places[features.SameNode], Decode: Places[c]},
		}
	}
	return out
}

// SplitPrefillMs is the prefill part of SplitSamples' TTFTs: a fixed part
// and a time per prompt token, the same on every prefill pod.
func SplitPrefillMs(tokens int64) float64 { return 30 + 0.02*float64(tokens) }

// SplitSamples draws n split requests as llm-d reports them: both
// placements, the tokens that moved and the transfers in flight, and the
// request's TTFT (SplitPrefillMs plus TransferSamples' transfer), but no
// timed transfer.
func SplitSamples(rng *rand.Rand, n int, classes []features.LinkClass, lo, hi int64) []features.Sample {
	out := TransferSamples(rng, n, classes, lo, hi, 0)
	for i := range out {
		out[i].Row.PodType = "prefill"
		out[i].ActualTTFTMs = SplitPrefillMs(out[i].Transfer.Tokens) + out[i].Transfer.Ms
		out[i].Transfer.Ms = 0
	}
	return out
}
