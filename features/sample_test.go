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
	for _, tg := range []Target{TTFT, TPOT, KVTransfer} {
		if got, ok := ParseTarget(tg.String()); !ok || got != tg {
			t.Errorf("ParseTarget(%q) = %v, %v", tg, got, ok)
		}
	}
}
