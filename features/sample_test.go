package features

import "testing"

func TestSampleLabels(t *testing.T) {
	tr := func(ms float64) *Transfer { return &Transfer{Ms: ms, Tokens: 100} }
	for _, tc := range []struct {
		name           string
		s              Sample
		ttft, tpot, kv float64 // 0: no label
	}{
		{"monolithic", Sample{ActualTTFTMs: 250, ActualTPOTMs: 12}, 250, 12, 0},
		{"the transfer is taken out of the TTFT", Sample{ActualTTFTMs: 250, Transfer: tr(40)}, 210, 0, 40},
		{"transfer only", Sample{Transfer: tr(40)}, 0, 0, 40},
		{"placement without a measured transfer", Sample{ActualTTFTMs: 250, Transfer: tr(0)}, 250, 0, 0},
		{"a transfer as long as the TTFT leaves no TTFT label", Sample{ActualTTFTMs: 40, Transfer: tr(40)}, 0, 0, 40},
		{"TPOT is untouched", Sample{ActualTPOTMs: 12, Transfer: tr(40)}, 0, 12, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for target, want := range map[Target]float64{TTFT: tc.ttft, TPOT: tc.tpot, KVTransfer: tc.kv} {
				got, ok := tc.s.Label(target)
				if ok != (want > 0) || ok && got != want {
					t.Errorf("%s label %v (%v), want %v", target, got, ok, want)
				}
			}
		})
	}
	if _, ok := (&Sample{PredictedTTFTMs: 5}).Predicted(KVTransfer); ok {
		t.Error("a served transfer prediction from nowhere")
	}
}

func TestTargetNames(t *testing.T) {
	for _, tg := range []Target{TTFT, TPOT, KVTransfer, SplitTTFT} {
		if got, ok := ParseTarget(tg.String()); !ok || got != tg {
			t.Errorf("ParseTarget(%q) = %v, %v", tg, got, ok)
		}
	}
}

// A split request's whole TTFT is its split-TTFT label whether or not its
// transfer was timed; a sample without both placements has none.
func TestSplitTTFTLabel(t *testing.T) {
	placed := func(ms float64) *Transfer {
		return &Transfer{Ms: ms, Tokens: 100, Prefill: Topology{Node: "p"}, Decode: Topology{Node: "d"}}
	}
	for _, tc := range []struct {
		name string
		s    Sample
		want float64 // 0: no label
	}{
		{"untimed, as llm-d reports it", Sample{ActualTTFTMs: 250, Transfer: placed(0)}, 250},
		{"timed: the transfer stays in", Sample{ActualTTFTMs: 250, Transfer: placed(40)}, 250},
		{"no TTFT", Sample{ActualTPOTMs: 12, Transfer: placed(40)}, 0},
		{"monolithic", Sample{ActualTTFTMs: 250}, 0},
		{"one placement only", Sample{ActualTTFTMs: 250, Transfer: &Transfer{Prefill: Topology{Node: "p"}}}, 0},
	} {
		got, ok := tc.s.Label(SplitTTFT)
		if ok != (tc.want > 0) || ok && got != tc.want {
			t.Errorf("%s: split TTFT label %v (%v), want %v", tc.name, got, ok, tc.want)
		}
	}
}
