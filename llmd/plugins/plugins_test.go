package plugins_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"

	"github.com/headroomhq/headroom/llmd/inproc"
)

// stockConfig is llm-d's P/D sample without topology affinity, its prefix
// index as llm-d ships it (the prefix index sizing benchmark's baseline).
const stockConfig = "../../../shared/upstream/llm-d-router/deploy/config/pd-epp-config.yaml"

// fleet has three prefill and three decode pods over two zones; the stock
// scorers prefer p0 and d0 (idle queues).
var fleet = []pod{
	{name: "p0", role: "prefill", node: "n1", rack: "r1", zone: "za"},
	{name: "p1", role: "prefill", node: "n2", rack: "r1", zone: "za", waiting: 1},
	{name: "p2", role: "prefill", node: "n3", rack: "r2", zone: "zb", waiting: 2},
	{name: "d0", role: "decode", node: "n4", rack: "r3", zone: "zb", running: 4},
	{name: "d1", role: "decode", node: "n5", rack: "r2", zone: "zb", waiting: 1, running: 9},
	{name: "d2", role: "decode", node: "n6", rack: "r1", zone: "za", waiting: 3, running: 12},
}

// preferring ranks pair (p2, d1) best, then the other pairs by name, then
// the pods alone.
func preferring(prefill, decode string) int {
	switch {
	case prefill == "p2" && decode == "d1":
		return 0
	case prefill == "":
		return 20 + int(decode[1]-'0')
	}
	return 1 + 3*int(prefill[1]-'0') + int(decode[1]-'0')
}

func TestShippedConfigPicksTheRankedPair(t *testing.T) {
	pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) { matrixAnswer(w, c, preferring, nil) })
	r := newRouter(t, shipped(t), pred.URL, "")
	ctx := context.Background()
	req := request("r1", 400, 1, map[string]string{"x-llm-d-slo-ttft-ms": "800"})
	res, err := r.Schedule(ctx, req, endpoints(fleet))
	if err != nil {
		t.Fatal(err)
	}
	if d, p := picks(t, res); d != "d1" || p != "p2" {
		t.Errorf("picked (%s, %s), want the ranked best pair (p2, d1)", p, d)
	}
	// One call per request, with every candidate of its role, each pod's
	// fields and topology, the SLO header.
	if len(pred.calls) != 1 {
		t.Fatalf("%d calls to /predict/pairs", len(pred.calls))
	}
	c := pred.calls[0]
	if !c.Matrix || c.InputTokenLength != 400 || c.TTFTSLOMs != 800 || len(c.Prefill) != 3 || len(c.Decode) != 3 {
		t.Fatalf("call %+v", c)
	}
	d1 := c.Decode[1]
	if !strings.HasSuffix(d1.Pod, "/d1") || d1.Waiting != 1 || d1.Topology["node"] != "n5" || d1.Topology["zone"] != "zb" || d1.PodType != "decode" {
		t.Errorf("decode candidate %+v", d1)
	}

	// llm-d's own config, with topology affinity, picks otherwise on the
	// same endpoints: the ranking decided.
	stock := newRouter(t, readConfig(t, topologyConfig), pred.URL, "")
	res, err = stock.Schedule(ctx, request("r2", 400, 1, nil), endpoints(fleet))
	if err != nil {
		t.Fatal(err)
	}
	if d, p := picks(t, res); d == "d1" && p == "p2" {
		t.Errorf("llm-d's topology config picks (%s, %s) too: the test does not tell the plugins from the stock scorers", p, d)
	}
}

// An extrapolated option ranked below a trusted one cannot be the better
// route (its estimate is likely low): the plugins pass it over and score,
// rather than leaving the request to the stock scorers.
func TestShippedConfigPassesOverAnExtrapolatedOptionRankedBelow(t *testing.T) {
	// p1 is beyond the model's range; its pairs rank 2-7, (p2, d1) 0.
	pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) {
		matrixAnswer(w, c, preferring, map[string]bool{"p1": true})
	})
	t.Setenv("PREDICTION_SERVER_URL", pred.URL)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := inproc.New(ctx, shipped(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Schedule(ctx, request("r", 400, 4, nil), endpoints(fleet))
	if err != nil {
		t.Fatal(err)
	}
	if d, p := picks(t, res); d != "d1" || p != "p2" {
		t.Errorf("picked (%s, %s), want the ranked best pair (p2, d1)", p, d)
	}
	if n := counter(t, reg, "headroom_epp_decisions_total", "outcome", "scored"); n != 1 {
		t.Errorf("headroom_epp_decisions_total{outcome=\"scored\"} = %v, want 1", n)
	}
	if n := counter(t, reg, "headroom_epp_decisions_total", "outcome", "extrapolated"); n != 0 {
		t.Errorf("headroom_epp_decisions_total{outcome=\"extrapolated\"} = %v, want 0", n)
	}
}

func TestShippedConfigSplitsAsTheDecider(t *testing.T) {
	pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) { matrixAnswer(w, c, preferring, nil) })
	r := newRouter(t, shipped(t), pred.URL, "")
	// Fewer than nonCachedTokens (16) tokens: the decider does not split,
	// so each decode pod competes alone, d0 the best of those.
	res, err := r.Schedule(context.Background(), request("short", 8, 2, nil), endpoints(fleet))
	if err != nil {
		t.Fatal(err)
	}
	if d, p := picks(t, res); d != "d0" || p != "" {
		t.Errorf("short prompt: picked (%q, %s), want d0 alone", p, d)
	}
}

// splitConfig lets Headroom decide the split: decideSplit in the producer
// and the split filter in the prefill profile.
func splitConfig(t testing.TB) []byte {
	c := string(shipped(t))
	c = strings.Replace(c, "    nonCachedTokens: 16\n    timeout: 10s\n", "    nonCachedTokens: 16\n    timeout: 10s\n    decideSplit: true\n", 1)
	c = strings.Replace(c, "- type: headroom-prefill-scorer\n", "- type: headroom-prefill-scorer\n- type: headroom-split-filter\n", 1)
	c = strings.Replace(c, "  - pluginRef: prefill-filter\n", "  - pluginRef: prefill-filter\n  - pluginRef: headroom-split-filter\n", 1)
	if !strings.Contains(c, "decideSplit") || strings.Count(c, "headroom-split-filter") != 2 {
		t.Fatal("the shipped config's text changed: update splitConfig")
	}
	return []byte(c)
}

func TestSplitDecision(t *testing.T) {
	for _, tt := range []struct {
		name        string
		rank        func(prefill, decode string) int
		wantDecode  string
		wantPrefill string
	}{
		{"a pair is best", preferring, "d1", "p2"},
		{"d2 is best alone", func(prefill, decode string) int {
			if prefill == "" && decode == "d2" {
				return 0
			}
			return preferring(prefill, decode) + 1
		}, "d2", ""},
		{"a tie does not split", func(prefill, decode string) int {
			if decode == "d0" && (prefill == "" || prefill == "p1") {
				return 0
			}
			return preferring(prefill, decode) + 1
		}, "d0", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) { matrixAnswer(w, c, tt.rank, nil) })
			r := newRouter(t, splitConfig(t), pred.URL, "")
			res, err := r.Schedule(context.Background(), request("r", 400, 3, nil), endpoints(fleet))
			if err != nil {
				t.Fatal(err)
			}
			if d, p := picks(t, res); d != tt.wantDecode || p != tt.wantPrefill {
				t.Errorf("picked (%q, %s), want (%q, %s)", p, d, tt.wantPrefill, tt.wantDecode)
			}
		})
	}
}

// counter is the value of a producer series with the given label value.
func counter(t testing.TB, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	return series(t, reg, name, label, value).GetCounter().GetValue()
}

// gauge is the value of a gauge series with the given label value.
func gauge(t testing.TB, reg prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	return series(t, reg, name, label, value).GetGauge().GetValue()
}

// series is the series name with the given label value; nil (which reads
// as 0) when there is none.
func series(t testing.TB, reg prometheus.Gatherer, name, label, value string) *dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelIs(m, label, value) {
				return m
			}
		}
	}
	return nil
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// scores is a profile's candidates' total scores by pod name.
func scores(res *fwksched.SchedulingResult, profile string) map[string]float64 {
	out := map[string]float64{}
	if pr := res.ProfileResults[profile]; pr != nil {
		for _, c := range pr.ScoredCandidates {
			out[c.GetMetadata().ID.Name] = c.Score
		}
	}
	return out
}

func TestFailOpen(t *testing.T) {
	closed := newFakePredictor(t, func(http.ResponseWriter, pairsCall) {})
	closedURL := closed.URL
	closed.Close()
	for _, tt := range []struct {
		reason string
		answer func(w http.ResponseWriter, c pairsCall)
		url    string
	}{
		{reason: "predictor_unavailable", url: closedURL},
		{reason: "predictor_unavailable", answer: func(w http.ResponseWriter, _ pairsCall) {
			http.Error(w, `{"detail":"boom"}`, http.StatusInternalServerError)
		}},
		{reason: "no_model", answer: func(w http.ResponseWriter, _ pairsCall) {
			http.Error(w, `{"detail":"Models not ready"}`, http.StatusServiceUnavailable)
		}},
		{reason: "deadline", answer: func(w http.ResponseWriter, c pairsCall) {
			time.Sleep(2 * time.Second) // past the 50 ms deadline
			matrixAnswer(w, c, preferring, nil)
		}},
		{reason: "extrapolated", answer: func(w http.ResponseWriter, c pairsCall) {
			// p2's pairs compete (the decider splits everywhere), the best
			// of them is the best option, and p2 is loaded beyond the
			// model's training range: the option could win on an estimate
			// that is likely low.
			matrixAnswer(w, c, preferring, map[string]bool{"p2": true})
		}},
		{reason: "no_option", answer: func(w http.ResponseWriter, c pairsCall) {
			// No transfer estimate for any pair: nothing to rank where the
			// decider splits.
			matrixAnswer(w, c, func(prefill, decode string) int {
				if prefill != "" {
					return -1
				}
				return preferring(prefill, decode)
			}, nil)
		}},
	} {
		t.Run(tt.reason, func(t *testing.T) {
			url := tt.url
			if tt.answer != nil {
				url = newFakePredictor(t, tt.answer).URL
			}
			t.Setenv("PREDICTION_SERVER_URL", url)
			reg := prometheus.NewRegistry()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			config := shipped(t)
			if tt.reason == "deadline" {
				config = readConfig(t, shippedConfig) // its 50 ms
			}
			r, err := inproc.New(ctx, config, reg)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := r.Schedule(ctx, request("r", 400, 4, nil), endpoints(fleet))
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			// The stock scorers decide, as in the shipped config without
			// the Headroom plugins (llm-d's scorers as shipped): the same
			// picks and the same scores.
			stock := newRouter(t, withoutHeadroom(t, readConfig(t, shippedConfig)), url, "")
			want, err := stock.Schedule(ctx, request("r", 400, 4, nil), endpoints(fleet))
			if err != nil {
				t.Fatal(err)
			}
			gd, gp := picks(t, res)
			wd, wp := picks(t, want)
			if gd != wd || gp != wp {
				t.Errorf("picked (%s, %s), llm-d's P/D config (%s, %s)", gp, gd, wp, wd)
			}
			for _, profile := range []string{"decode", "prefill"} {
				got, want := scores(res, profile), scores(want, profile)
				for pod, s := range want {
					if got[pod] != s {
						t.Errorf("%s profile: %s scored %v, llm-d's P/D config %v", profile, pod, got[pod], s)
					}
				}
			}
			if n := counter(t, reg, "headroom_epp_decisions_total", "outcome", tt.reason); n != 1 {
				t.Errorf("headroom_epp_decisions_total{outcome=%q} = %v, want 1", tt.reason, n)
			}
			// The deadline holds: the producer gave up on the slow
			// predictor at 50 ms, not at its 2 s answer.
			if tt.reason == "deadline" && elapsed > time.Second {
				t.Errorf("scheduling took %v past a 50 ms deadline", elapsed)
			}
		})
	}
}

// The requests the plugins leave to llm-d's scorers come in bursts (a
// prefill pool loaded past the model's range), and within one the scraped
// queues have not moved yet: the shipped prefill profile also counts the
// requests the EPP has in flight on each pod (active-request-scorer), so a
// burst spreads where llm-d's plain P/D config sends it all to the pod
// with the shortest scraped queue.
func TestFailOpenSpreadsABurstByTheEPPsInFlightRequests(t *testing.T) {
	pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) {
		matrixAnswer(w, c, preferring, map[string]bool{"p0": true, "p1": true, "p2": true})
	})
	reg := prometheus.NewRegistry()
	r := newRouterWith(t, shipped(t), pred.URL, "", reg)
	plain := newRouter(t, readConfig(t, stockConfig), pred.URL, "")
	prefillPick := func(rt *inproc.Router, n int) string {
		res, err := rt.Schedule(context.Background(), request(fmt.Sprintf("r%d", n), 400, uint32(n+1), nil), heldEndpoints(t, rt, fleet))
		if err != nil {
			t.Fatal(err)
		}
		_, p := picks(t, res)
		return p
	}
	var got, llmd []string
	for n := range 2 { // neither answered: both stay in flight
		got = append(got, prefillPick(r, n))
		llmd = append(llmd, prefillPick(plain, n))
	}
	if n := counter(t, reg, "headroom_epp_decisions_total", "outcome", "extrapolated"); n != 2 {
		t.Fatalf("headroom_epp_decisions_total{outcome=\"extrapolated\"} = %v, want 2", n)
	}
	if llmd[0] != "p0" || llmd[1] != "p0" {
		t.Fatalf("llm-d's P/D config picked prefill pods %v, want p0 twice (the shortest scraped queue): the test does not tell the configs apart", llmd)
	}
	if got[0] != "p0" || got[1] == "p0" {
		t.Errorf("the shipped config's fallback picked prefill pods %v: want p0, then another pod than the one with a request in flight", got)
	}
}

// TestShippedConfigLetsTheRankingDecide: the Headroom scorers score the
// best pod 1 and the next ½ (halvingScores), so at their weight the best
// pod stays the pick only while the runner-up's half is above everything
// llm-d's scorers can add (each scores at most 1): every profile's other
// weights sum to less than half the Headroom scorer's. A profile names
// its plugins by pluginRef, which is a plugin's name (its type when it
// has none); what counts as Headroom's is its type, as withoutHeadroom
// tells them apart.
func TestShippedConfigLetsTheRankingDecide(t *testing.T) {
	var doc struct {
		Plugins []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"plugins"`
		SchedulingProfiles []struct {
			Name    string `json:"name"`
			Plugins []struct {
				PluginRef string  `json:"pluginRef"`
				Weight    float64 `json:"weight"`
			} `json:"plugins"`
		} `json:"schedulingProfiles"`
	}
	if err := yaml.Unmarshal(readConfig(t, shippedConfig), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.SchedulingProfiles) != 2 {
		t.Fatalf("%d profiles, want prefill and decode", len(doc.SchedulingProfiles))
	}
	typeOf := map[string]string{}
	for _, pl := range doc.Plugins {
		typeOf[cmp.Or(pl.Name, pl.Type)] = pl.Type
	}
	for _, p := range doc.SchedulingProfiles {
		var headroom, others float64
		for _, ref := range p.Plugins {
			typ, ok := typeOf[ref.PluginRef]
			if !ok {
				t.Fatalf("profile %s refers to plugin %q, which the config does not declare", p.Name, ref.PluginRef)
			}
			if strings.HasPrefix(typ, "headroom-") {
				headroom += ref.Weight
			} else {
				others += ref.Weight
			}
		}
		if !(headroom/2 > others) {
			t.Errorf("profile %s: Headroom's scorer weighs %v, llm-d's %v: the runner-up's %v could be outvoted", p.Name, headroom, others, headroom/2)
		}
	}
}

// TestShippedConfigSizesThePrefixIndex: the shipped config's approximate
// prefix index counts 64-token blocks (llm-d's floor) and does not autotune,
// which would take the engine's 16-token block count for its capacity, four
// times what a pod caches; the capacity is then the one the config states
// (docs/COMPATIBILITY.md says how to size it).
func TestShippedConfigSizesThePrefixIndex(t *testing.T) {
	var doc struct {
		Plugins []struct {
			Type       string         `json:"type"`
			Parameters map[string]any `json:"parameters"`
		} `json:"plugins"`
	}
	if err := yaml.Unmarshal(readConfig(t, shippedConfig), &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range doc.Plugins {
		if p.Type != "approx-prefix-cache-producer" {
			continue
		}
		if x := p.Parameters; x["autoTune"] != false || x["blockSizeTokens"] != 64.0 || !(x["lruCapacityPerServer"].(float64) > 0) {
			t.Errorf("the prefix index's parameters %v: want autoTune false, 64-token blocks and a capacity", x)
		}
		return
	}
	t.Fatal("the shipped config has no approx-prefix-cache-producer")
}

// TestDecisionTimeCountsThePluginsAlone: headroom_epp_decision_seconds
// observes each completed decision once, with at least the ranking's own
// time (a predictor that answers after a pause) and no more than the whole
// decision llm-d's scheduler took around the plugins.
func TestDecisionTimeCountsThePluginsAlone(t *testing.T) {
	const pause = 3 * time.Millisecond
	pred := newFakePredictor(t, func(w http.ResponseWriter, c pairsCall) {
		time.Sleep(pause)
		matrixAnswer(w, c, preferring, nil)
	})
	reg := prometheus.NewRegistry()
	r := newRouterWith(t, shipped(t), pred.URL, "", reg)
	ctx := context.Background()
	var whole time.Duration
	const decisions = 3
	for n := range decisions {
		req := request(fmt.Sprintf("r%d", n), 400, uint32(n), nil)
		start := time.Now()
		res, err := r.Schedule(ctx, req, endpoints(fleet))
		whole += time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		respond(ctx, r, req, res)
	}
	h := series(t, reg, "headroom_epp_decision_seconds", "plugin", "headroom-pairs-producer").GetHistogram()
	if h.GetSampleCount() != decisions {
		t.Fatalf("%d decisions observed, want %d", h.GetSampleCount(), decisions)
	}
	if sum := time.Duration(h.GetSampleSum() * float64(time.Second)); sum < decisions*pause || sum > whole {
		t.Errorf("the plugins' time on %d decisions is %v: want at least the predictor's pauses (%v) and at most the decisions' own %v", decisions, sum, decisions*pause, whole)
	}
}

// TestWithoutHeadroomKeepsLlmdsConfig: the benchmarks' baseline is the
// shipped config less exactly its Headroom plugins, with llm-d's plugins
// and their parameters as shipped, and it schedules.
func TestWithoutHeadroomKeepsLlmdsConfig(t *testing.T) {
	c := string(withoutHeadroom(t, readConfig(t, shippedConfig)))
	if strings.Contains(c, "headroom") {
		t.Errorf("a Headroom plugin is left:\n%s", c)
	}
	for _, want := range []string{"lruCapacityPerServer: 7813", "blockSizeTokens: 64", "topology-extractor", "prefix-based-pd-decider", "pluginRef: queue-scorer"} {
		if !strings.Contains(c, want) {
			t.Errorf("%q is gone:\n%s", want, c)
		}
	}
	r := newRouter(t, []byte(c), "http://127.0.0.1:1", "")
	res, err := r.Schedule(context.Background(), request("r1", 400, 1, nil), endpoints(fleet))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := picks(t, res); d == "" {
		t.Error("no decode pick")
	}
}
