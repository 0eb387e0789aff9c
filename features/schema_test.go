package features

import (
	"fmt"
	"strings"
	"testing"
)

func TestBuildGolden(t *testing.T) {
	row := Row{
		KVCachePercentage: 0.3252, InputTokenLength: 1000, NumRequestWaiting: 5, NumRequestRunning: 2,
		NumTokensGenerated: 1, PrefixCacheScore: 0.6, PodType: "Prefill",
		PrefillTokensInFlight: 4809, DecodeTokensInFlight: 7, EncoderInputSize: 3, EncoderMatchedSize: 1,
	}
	want := map[string]float64{
		"is_queued": 1, "kv_cache_percentage": 0.3252, "input_token_length": 1000, "num_request_waiting": 5,
		"num_request_running": 2, "prefill_tokens_in_flight": 4809, "decode_tokens_in_flight": 7,
		"encoder_input_size": 3, "encoder_matched_size": 1, "prefix_cache_score": 0.6,
		"effective_input_tokens": 400, "prefill_score_bucket": 2, "pod_type": PodPrefill,
		"effective_input_tokens_sq_k": 0.16, "prefill_work_tokens": 5209, "batch_load": 8,
		"effective_input_tokens_over_128": 272, "effective_input_tokens_over_256": 144,
		"effective_input_tokens_over_512": 0, "effective_input_tokens_over_1024": 0,
		"effective_input_tokens_over_2048": 0,
		"prefill_tokens_per_request":       2404.5, "prefill_tokens_in_flight_upto_2048": 2048,
		"prefill_tokens_in_flight_upto_8192": 4809, "prefill_tokens_in_flight_upto_32768": 4809,
	}
	var names []string
	for _, n := range columnNames {
		names = append(names, n)
	}
	s := MustSchema(names...)
	x := s.Build(&row, nil)
	for i, n := range s.Names() {
		w, ok := want[n]
		if !ok {
			t.Errorf("column %q has no golden value", n)
			continue
		}
		if d := x[i] - w; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", n, x[i], w)
		}
	}
}

func TestBuildEdgeValues(t *testing.T) {
	tests := []struct {
		name string
		row  Row
		col  string
		want float64
	}{
		{"not queued", Row{}, "is_queued", 0},
		{"prefix 1 is bucket 3", Row{PrefixCacheScore: 1}, "prefill_score_bucket", 3},
		{"prefix 0.25 is bucket 1", Row{PrefixCacheScore: 0.25}, "prefill_score_bucket", 1},
		{"prefix above 1 clamps", Row{PrefixCacheScore: 1.5, InputTokenLength: 100}, "effective_input_tokens", 0},
		{"full prefix hit", Row{PrefixCacheScore: 1, InputTokenLength: 100}, "effective_input_tokens", 0},
		{"empty pod type is monolithic", Row{PodType: ""}, "pod_type", PodMonolithic},
		{"unknown pod type is monolithic", Row{PodType: "both"}, "pod_type", PodMonolithic},
		{"decode pod", Row{PodType: " DECODE "}, "pod_type", PodDecode},
		{"idle server still has this request", Row{}, "batch_load", 1},
		{"prompt in flight on an idle pod counts as one request's", Row{PrefillTokensInFlight: 300}, "prefill_tokens_per_request", 300},
		{"nothing in flight", Row{NumRequestRunning: 4}, "prefill_tokens_per_request", 0},
		{"prompt in flight below the budget", Row{PrefillTokensInFlight: 1500}, "prefill_tokens_in_flight_upto_2048", 1500},
		{"prompt in flight beyond the budget stops at it", Row{PrefillTokensInFlight: 50000}, "prefill_tokens_in_flight_upto_32768", 32768},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustSchema(tt.col)
			if got := s.Build(&tt.row, nil)[0]; got != tt.want {
				t.Errorf("%s = %v, want %v", tt.col, got, tt.want)
			}
		})
	}
}

// num_tokens_generated is 1 when the router predicts and 0 when it reports a
// sample; no default column may read it, or the model would learn on one
// value and serve on the other.
func TestDefaultSchemasIgnoreTokensGenerated(t *testing.T) {
	for _, tg := range PodTargets {
		s := defaultSchema(tg)
		a, b := Row{NumTokensGenerated: 0, InputTokenLength: 10}, Row{NumTokensGenerated: 1, InputTokenLength: 10}
		xa, xb := s.Build(&a, nil), s.Build(&b, nil)
		for i := range xa {
			if xa[i] != xb[i] {
				t.Errorf("%s column %s depends on num_tokens_generated", tg, s.Names()[i])
			}
		}
	}
}

func TestNewSchemaRefusesUnknownAndRepeated(t *testing.T) {
	for _, names := range [][]string{{"kv_cache_percentage", "gpu_temperature"}, {"is_queued", "is_queued"}} {
		if _, err := NewSchema(names); err == nil {
			t.Errorf("NewSchema(%v) accepted", names)
		} else if !strings.Contains(err.Error(), names[1]) {
			t.Errorf("NewSchema(%v) error %q does not name the column", names, err)
		}
	}
}

func TestBuildReusesBuffer(t *testing.T) {
	s := defaultSchema(TTFT)
	buf := make([]float64, 0, 64)
	row := Row{InputTokenLength: 5}
	if allocs := testing.AllocsPerRun(100, func() { s.Build(&row, buf) }); allocs != 0 {
		t.Errorf("Build allocates %v times with a large enough buffer", allocs)
	}
}

func TestParseTarget(t *testing.T) {
	for _, tg := range Targets {
		if got, ok := ParseTarget(strings.ToUpper(tg.String())); !ok || got != tg {
			t.Errorf("ParseTarget(%q) = %v, %v", tg, got, ok)
		}
	}
	if _, ok := ParseTarget("e2e"); ok {
		t.Error("ParseTarget accepted e2e")
	}
}

func BenchmarkBuildTTFT(b *testing.B) {
	s := defaultSchema(TTFT)
	row := Row{KVCachePercentage: 0.3, InputTokenLength: 900, NumRequestWaiting: 2, NumRequestRunning: 7, PrefixCacheScore: 0.4, PodType: "decode"}
	buf := make([]float64, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = s.Build(&row, buf[:0])
	}
}

// Every column has a physical direction; the ones a line may use as sign
// constraints say that more work never makes a request faster.
func TestDirections(t *testing.T) {
	want := map[string]int{
		"input_token_length": 1, "num_request_running": 1, "prefix_cache_score": -1,
		"prefill_score_bucket": -1, "pod_type": 0, "effective_input_tokens_over_256": 1,
	}
	var names []string
	for _, n := range columnNames {
		names = append(names, n)
	}
	s := MustSchema(names...)
	d := s.Directions()
	if len(d) != s.Len() {
		t.Fatalf("%d directions for %d columns", len(d), s.Len())
	}
	for i, n := range s.Names() {
		if w, ok := want[n]; ok && d[i] != w {
			t.Errorf("%s direction %d, want %d", n, d[i], w)
		}
	}
}

// The hinge columns bend the line where a GPU's prefill turns from
// memory-bound to compute-bound, and are 0 below their knot.
func TestHinges(t *testing.T) {
	s := MustSchema("effective_input_tokens_over_256", "effective_input_tokens_over_1024")
	for _, tt := range []struct {
		row  Row
		want [2]float64
	}{
		{Row{InputTokenLength: 100}, [2]float64{0, 0}},
		{Row{InputTokenLength: 300}, [2]float64{44, 0}},
		{Row{InputTokenLength: 2000}, [2]float64{1744, 976}},
		{Row{InputTokenLength: 2000, PrefixCacheScore: 0.5}, [2]float64{744, 0}},
	} {
		if x := s.Build(&tt.row, nil); x[0] != tt.want[0] || x[1] != tt.want[1] {
			t.Errorf("%+v: %v, want %v", tt.row, x, tt.want)
		}
	}
}

// defaultSchema is the compiled schema of a target's default columns.
func defaultSchema(t Target) Schema { return MustSchema(DefaultColumns(t)...) }

// Targets is the one list of targets: the per-pod ones are among them, in
// its order, and are exactly those with default columns.
func TestTargetsListEveryTarget(t *testing.T) {
	var pod []Target
	for i, tg := range Targets {
		if int(tg) != i {
			t.Errorf("Targets[%d] is %s (%d): a target's value is its index", i, tg, tg)
		}
		if got, ok := ParseTarget(tg.String()); !ok || got != tg {
			t.Errorf("%s does not parse back", tg)
		}
		if tg.PerPod() {
			pod = append(pod, tg)
		}
		if tg.PerPod() != (DefaultColumns(tg) != nil) {
			t.Errorf("%s: per pod %v, default columns %v", tg, tg.PerPod(), DefaultColumns(tg))
		}
	}
	if fmt.Sprint(pod) != fmt.Sprint(PodTargets[:]) {
		t.Errorf("per-pod targets in Targets' order %v, PodTargets %v", pod, PodTargets)
	}
}
