package sim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/lab/sim"
	"github.com/headroomhq/headroom/lab/sim/workload"
)

func agentic(t *testing.T, rate float64) []*sim.Request {
	t.Helper()
	reqs, err := workload.Agentic(workload.DefaultAgentic(rate))
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

func whatIf(t *testing.T, reqs []*sim.Request, router string, specs ...string) []sim.Result {
	t.Helper()
	cfgs := make([]sim.Config, len(specs))
	for i, spec := range specs {
		c, err := sim.ParseConfig(spec, sim.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		cfgs[i] = c
	}
	res, err := sim.WhatIf(context.Background(), reqs, cfgs, sim.WhatIfOptions{NewRouter: func() sim.Router {
		r, _ := sim.NewRouter(router)
		return r
	}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestWhatIfCacheSettings(t *testing.T) {
	reqs := agentic(t, 4)
	// The smallest cache that holds the largest request alone: every
	// request fits, but not many at once.
	largest := 0
	for _, r := range reqs {
		largest = max(largest, (r.PromptTokens+r.OutputTokens-1+sim.BlockSize-1)/sim.BlockSize)
	}
	tinySpec := fmt.Sprintf("kv_blocks=%d", largest)
	res := whatIf(t, reqs, "load-prefix", "name=base", "prefix_caching=false", "kv_blocks=1500", tinySpec)
	base, off, small, tiny := res[0].Summary, res[1].Summary, res[2].Summary, res[3].Summary
	for i, r := range res {
		if r.Summary.Completed != len(reqs) {
			t.Errorf("%s: %d of %d completed", r.Config.Name, r.Summary.Completed, len(reqs))
		}
		if i > 0 && r.Config.Name != []string{"", "prefix_caching=false", "kv_blocks=1500", tinySpec}[i] {
			t.Errorf("config %d named %q", i, r.Config.Name)
		}
	}
	// Every session shares a 1 200-token system prompt and resends its
	// history: most prompt tokens are hits.
	if base.PrefixHitRate < 0.7 || off.PrefixHitRate != 0 {
		t.Errorf("hit rate %.2f with caching, %.2f without; want > 0.7 and 0", base.PrefixHitRate, off.PrefixHitRate)
	}
	if off.TTFT.P50 <= base.TTFT.P50 || off.OutputTokensPerS >= base.OutputTokensPerS {
		t.Errorf("caching off: TTFT p50 %.0f vs %.0f, %.0f vs %.0f tok/s; want it slower",
			off.TTFT.P50, base.TTFT.P50, off.OutputTokensPerS, base.OutputTokensPerS)
	}
	if base.Evictions != 0 || small.Evictions == 0 || small.PrefixHitRate >= base.PrefixHitRate {
		t.Errorf("evictions %d → %d and hit rate %.2f → %.2f with a smaller cache", base.Evictions, small.Evictions,
			base.PrefixHitRate, small.PrefixHitRate)
	}
	if base.Preemptions != 0 || tiny.Preemptions == 0 {
		t.Errorf("preemptions: %d in the default cache, %d in %d blocks; want 0 and some", base.Preemptions, tiny.Preemptions, largest)
	}
}

func TestPrefixAwareRoutingKeepsSessionsTogether(t *testing.T) {
	reqs := agentic(t, 4)
	rr := whatIf(t, reqs, "round-robin", "servers=4")[0].Summary
	lp := whatIf(t, reqs, "load-prefix", "servers=4")[0].Summary
	// Round-robin sends a session's turns to a server that has its history
	// only by chance; the prefix scorer follows the history.
	if lp.PrefixHitRate <= rr.PrefixHitRate+0.05 {
		t.Errorf("hit rate: load-prefix %.3f, round-robin %.3f; want load-prefix clearly ahead", lp.PrefixHitRate, rr.PrefixHitRate)
	}
}

func TestWhatIfIsDeterministic(t *testing.T) {
	a := whatIf(t, agentic(t, 6), "load-prefix", "default", "kv_blocks=800")
	b := whatIf(t, agentic(t, 6), "load-prefix", "default", "kv_blocks=800")
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two identical what-if runs differ")
	}
}

func TestWriteJSON(t *testing.T) {
	res := whatIf(t, agentic(t, 4), "load-prefix", "name=a", "name=b,prefix_caching=false")
	var buf bytes.Buffer
	if err := sim.WriteJSON(&buf, res); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Configs []map[string]any `json:"configs"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.String())
	}
	if len(doc.Configs) != 2 || doc.Configs[0]["name"] != "a" || doc.Configs[1]["name"] != "b" {
		t.Fatalf("configs out of order: %s", buf.String())
	}
	for _, key := range []string{"throughput_rps", "output_tokens_per_s", "prefix_hit_rate", "preemptions",
		"ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "e2e_p50_ms", "kv_blocks", "prefix_caching"} {
		if _, ok := doc.Configs[0][key]; !ok {
			t.Errorf("key %s missing", key)
		}
	}
	if _, ok := doc.Configs[0]["change_vs_first"]; ok {
		t.Error("the baseline has a change from itself")
	}
	change := doc.Configs[1]["change_vs_first"].(map[string]any)
	hitA, hitB := doc.Configs[0]["prefix_hit_rate"].(float64), doc.Configs[1]["prefix_hit_rate"].(float64)
	if got := change["prefix_hit_rate"].(float64); got != hitB-hitA {
		t.Errorf("hit-rate change %v, want the difference %v", got, hitB-hitA)
	}
	ttA, ttB := doc.Configs[0]["ttft_p50_ms"].(float64), doc.Configs[1]["ttft_p50_ms"].(float64)
	if got, want := change["ttft_p50_ms"].(float64), (ttB-ttA)/ttA; got-want > 1e-5 || want-got > 1e-5 {
		t.Errorf("TTFT change %v, want %v", got, want)
	}
}

func TestWriteTable(t *testing.T) {
	res := whatIf(t, agentic(t, 4), "load-prefix", "name=first", "name=second,prefix_caching=false")
	var buf bytes.Buffer
	if err := sim.WriteTable(&buf, res); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"first", "second", "vs first", "throughput (req/s)", "prefix hit rate", "TTFT p95 (ms)", "-"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
