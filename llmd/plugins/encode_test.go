package plugins

import (
	"encoding/json"
	"math"
	"testing"
)

func TestAppendPairsRequestIsJSONMarshal(t *testing.T) {
	pod := func(name string, kv, prefix float64) pairCandidate {
		return pairCandidate{Pod: name, Topology: topology{Node: "n-" + name, Rack: "r1", Zone: "z1", Region: "eu"},
			KVCachePercentage: kv, NumRequestWaiting: 3, NumRequestRunning: 17, PrefixCacheScore: prefix, PodType: "prefill",
			PrefillTokensInFlight: 12345, KVTransfersInFlight: 2}
	}
	for _, tt := range []struct {
		name string
		req  pairsRequest
	}{
		{"zero", pairsRequest{}},
		{"a router's", pairsRequest{InputTokenLength: 3000, KVBytesPerToken: 131072, TTFTSLOMs: 800, TPOTSLOMs: 62.5, Matrix: true,
			Prefill: []pairCandidate{pod("llm-d/p-0", 0.3, 0.25), pod("llm-d/p-1", 1, 0)},
			Decode:  []pairCandidate{pod("llm-d/d-0", 0, 1.0/3)}}},
		{"labels left out", pairsRequest{InputTokenLength: 1, Prefill: []pairCandidate{},
			Decode: []pairCandidate{{Pod: "d", Topology: topology{Node: "n"}}}}},
		{"escapes and unicode", pairsRequest{InputTokenLength: 1, Decode: []pairCandidate{{Pod: "ns/\"d\"\\<x>&\n\x01",
			Topology: topology{Node: "nœud-é", Rack: "\u2028", Zone: "\xff"}, PodType: "decode"}}}},
		{"exponents", pairsRequest{InputTokenLength: -5, KVBytesPerToken: 1e21, TTFTSLOMs: 1e-7, TPOTSLOMs: 5e-324,
			Decode: []pairCandidate{pod("d", 1e-6, 9.99e-7), pod("e", -0.5, 123456789.125)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := json.Marshal(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendPairsRequest([]byte("prefix"), &tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "prefix"+string(want) {
				t.Errorf("encoded\n%s\nwant json.Marshal's\nprefix%s", got, want)
			}
		})
	}
	for _, v := range []float64{math.NaN(), math.Inf(1)} {
		req := pairsRequest{Decode: []pairCandidate{{Pod: "d", KVCachePercentage: v}}}
		if _, err := appendPairsRequest(nil, &req); err == nil {
			t.Errorf("a candidate's %v encoded", v)
		}
	}
}

// benchPairsRequest is a 16 × 16 request of the shape the producer sends.
func benchPairsRequest() pairsRequest {
	var req pairsRequest
	req.InputTokenLength, req.Matrix = 3000, true
	for n := range 16 {
		for _, list := range []*[]pairCandidate{&req.Prefill, &req.Decode} {
			*list = append(*list, pairCandidate{Pod: "llm-d/pod-" + string(rune('a'+n)), Topology: topology{Node: "node-7", Rack: "r3", Zone: "z1", Region: "eu"},
				KVCachePercentage: float64(n%10) / 10, NumRequestWaiting: int64(n % 3), NumRequestRunning: int64(2 + n%9), PodType: "decode"})
		}
	}
	return req
}

func BenchmarkAppendPairsRequest(b *testing.B) {
	req := benchPairsRequest()
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		var err error
		if buf, err = appendPairsRequest(buf[:0], &req); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}
