package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	fwkdl "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/datalayer"
	"github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requestcontrol"
	fwkrh "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/requesthandling"
	fwksched "github.com/llm-d/llm-d-router/pkg/epp/framework/interface/scheduling"
	attrtopology "github.com/llm-d/llm-d-router/pkg/epp/framework/plugins/datalayer/attribute/topology"

	"github.com/headroomhq/headroom/llmd/inproc"
)

// shippedConfig is the EndpointPickerConfig the repository ships for P/D
// with Headroom, and llm-d's own P/D sample with topology affinity.
const (
	shippedConfig  = "../../deploy/llm-d/pd-headroom-epp-config.yaml"
	topologyConfig = "../../../shared/upstream/llm-d-router/deploy/config/pd-topology-epp-config.yaml"
)

func readConfig(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v (the llm-d-router tree must be beside the repository, as CI has it)", path, err)
	}
	return b
}

// shipped is the shipped config with a deadline a loaded CI machine
// cannot miss, for the tests of what the plugins decide; the deadline
// itself is TestFailOpen's.
func shipped(t testing.TB) []byte {
	t.Helper()
	c := string(readConfig(t, shippedConfig))
	if !strings.Contains(c, "    timeout: 50ms\n") {
		t.Fatal("the shipped config's deadline changed: update shipped")
	}
	return []byte(strings.Replace(c, "    timeout: 50ms\n", "    timeout: 10s\n", 1))
}

// pod is a candidate endpoint as the EPP's data layer would hand it: its
// role label, scraped metrics and the topology-extractor's attribute.
type pod struct {
	name, role       string
	node, rack, zone string
	waiting, running int
	kv               float64
}

func (p pod) meta() *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{
		ID:      types.NamespacedName{Namespace: "llm-d", Name: p.name},
		Address: "10.0.0.1", Port: "8000",
		Labels: map[string]string{"llm-d.ai/role": p.role},
	}
}

func (p pod) metrics() *fwkdl.Metrics {
	m := fwkdl.NewMetrics()
	m.WaitingQueueSize, m.RunningRequestsSize, m.KVCacheUsagePercent = p.waiting, p.running, p.kv
	return m
}

func (p pod) withTopology(e fwksched.Endpoint) fwksched.Endpoint {
	e.Put(attrtopology.TopologyAttributeKey, &attrtopology.Topology{Hostname: p.node, Rack: p.rack, Zone: p.zone, Region: "eu"})
	return e
}

func (p pod) endpoint() fwksched.Endpoint {
	return p.withTopology(fwksched.NewEndpoint(p.meta(), p.metrics(), nil))
}

func endpoints(pods []pod) []fwksched.Endpoint {
	out := make([]fwksched.Endpoint, len(pods))
	for i, p := range pods {
		out[i] = p.endpoint()
	}
	return out
}

// heldEndpoints is pods as r's data layer holds them (inproc.Router.Endpoint):
// announced to its extractors once, so that the attributes they keep, the
// EPP's in-flight load among them, follow r's decisions.
func heldEndpoints(t testing.TB, r *inproc.Router, pods []pod) []fwksched.Endpoint {
	t.Helper()
	out := make([]fwksched.Endpoint, len(pods))
	for i, p := range pods {
		e, err := r.Endpoint(context.Background(), p.meta(), p.metrics())
		if err != nil {
			t.Fatal(err)
		}
		out[i] = p.withTopology(e)
	}
	return out
}

// request is a completion of n prompt tokens, distinct per seed.
func request(id string, n int, seed uint32, headers map[string]string) *fwksched.InferenceRequest {
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = seed*1_000_003 + uint32(i)
	}
	h := map[string]string{"x-request-id": id}
	for k, v := range headers {
		h[k] = v
	}
	return &fwksched.InferenceRequest{RequestID: id, TargetModel: "m", Headers: h,
		Body: &fwkrh.InferenceRequestBody{
			Completions:      &fwkrh.CompletionsRequest{Prompt: fwkrh.Prompt{Raw: fmt.Sprintf("prompt %d", seed)}},
			TokenizedRequest: &fwkrh.TokenizedRequest{Prompts: []fwkrh.PromptTokens{{TokenIDs: ids}}},
		}}
}

// picks are a scheduling result's decode and prefill pods ("" when the
// request is not split).
func picks(t testing.TB, r *fwksched.SchedulingResult) (decode, prefill string) {
	t.Helper()
	d := r.ProfileResults["decode"]
	if d == nil || len(d.TargetEndpoints) == 0 {
		t.Fatalf("no decode pick in %+v", r)
	}
	decode = d.TargetEndpoints[0].GetMetadata().ID.Name
	if p := r.ProfileResults["prefill"]; p != nil && len(p.TargetEndpoints) > 0 {
		prefill = p.TargetEndpoints[0].GetMetadata().ID.Name
	}
	return decode, prefill
}

// newRouter loads config into llm-d's scheduler with the producer pointed
// at predictor and trainer (through the variables llm-d's chart sets).
func newRouter(t testing.TB, config []byte, predictor, trainer string) *inproc.Router {
	t.Helper()
	return newRouterWith(t, config, predictor, trainer, prometheus.NewRegistry())
}

// newRouterWith is newRouter with the plugins' series going to reg.
func newRouterWith(t testing.TB, config []byte, predictor, trainer string, reg prometheus.Registerer) *inproc.Router {
	t.Helper()
	t.Setenv("PREDICTION_SERVER_URL", predictor)
	t.Setenv("TRAINING_SERVER_URL", trainer)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := inproc.New(ctx, config, reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pairsCall is one /predict/pairs request as a fake predictor saw it.
type pairsCall struct {
	InputTokenLength int64   `json:"input_token_length"`
	TTFTSLOMs        float64 `json:"ttft_slo_ms"`
	TPOTSLOMs        float64 `json:"tpot_slo_ms"`
	Matrix           bool    `json:"matrix"`
	Prefill, Decode  []struct {
		Pod      string            `json:"pod"`
		Topology map[string]string `json:"topology"`
		Waiting  int64             `json:"num_request_waiting"`
		Running  int64             `json:"num_request_running"`
		KV       float64           `json:"kv_cache_percentage"`
		Prefix   float64           `json:"prefix_cache_score"`
		PodType  string            `json:"pod_type"`
		InFlight int64             `json:"kv_transfers_in_flight"`
	}
}

// fakePredictor answers /predict/pairs with answer(call), recording calls.
type fakePredictor struct {
	*httptest.Server
	mu    sync.Mutex
	calls []pairsCall
}

func newFakePredictor(t testing.TB, answer func(w http.ResponseWriter, c pairsCall)) *fakePredictor {
	f := &fakePredictor{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c pairsCall
		if r.URL.Path != "/predict/pairs" || json.NewDecoder(r.Body).Decode(&c) != nil {
			http.Error(w, `{"detail":"bad request"}`, http.StatusUnprocessableEntity)
			return
		}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		answer(w, c)
	}))
	t.Cleanup(f.Close)
	return f
}

// matrixAnswer writes a matrix answer whose pair and no-split ranks are
// rank(prefill pod, decode pod) and rank("", decode pod), pods by their
// names without the namespace, and whose extrapolated flags are those of
// the pods named.
func matrixAnswer(w http.ResponseWriter, c pairsCall, rank func(prefill, decode string) int, extrapolated map[string]bool) {
	type matrix struct {
		Rank                [][]*int     `json:"rank"`
		TTFT                [][]*float64 `json:"ttft_ms"`
		NoSplitRank         []int        `json:"no_split_rank"`
		NoSplitTTFT         []float64    `json:"no_split_ttft_ms"`
		TPOT                []float64    `json:"tpot_ms"`
		PrefillExtrapolated []bool       `json:"prefill_extrapolated"`
		DecodeExtrapolated  []bool       `json:"decode_extrapolated"`
	}
	var m matrix
	for _, d := range c.Decode {
		var ranks []*int
		var ttfts []*float64
		for _, p := range c.Prefill {
			r := rank(short(p.Pod), short(d.Pod))
			if r < 0 { // no estimate
				ranks, ttfts = append(ranks, nil), append(ttfts, nil)
				continue
			}
			ttft := 100 + 10*float64(r)
			ranks, ttfts = append(ranks, &r), append(ttfts, &ttft)
		}
		m.Rank, m.TTFT = append(m.Rank, ranks), append(m.TTFT, ttfts)
		r := rank("", short(d.Pod))
		m.NoSplitRank, m.NoSplitTTFT = append(m.NoSplitRank, r), append(m.NoSplitTTFT, 100+10*float64(r))
		m.TPOT, m.DecodeExtrapolated = append(m.TPOT, 20), append(m.DecodeExtrapolated, extrapolated[short(d.Pod)])
	}
	for _, p := range c.Prefill {
		m.PrefillExtrapolated = append(m.PrefillExtrapolated, extrapolated[short(p.Pod)])
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"split": true, "matrix": m, "kv_transfer_model": true})
}

// short is an endpoint name without its namespace.
func short(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }

// respond plays the model server's answer to a scheduled request: one
// body, the end of the stream.
func respond(ctx context.Context, r *inproc.Router, req *fwksched.InferenceRequest, result *fwksched.SchedulingResult) {
	target := result.ProfileResults["decode"].TargetEndpoints[0].GetMetadata()
	r.ResponseHeader(ctx, req, &requestcontrol.Response{RequestID: req.RequestID, Headers: map[string]string{}, StartOfStream: true}, target)
	r.ResponseBody(ctx, req, &requestcontrol.Response{RequestID: req.RequestID, EndOfStream: true}, target)
}

// withoutHeadroom is config with the Headroom plugins (types headroom-*)
// and their references in the profiles removed: the same llm-d config,
// prefix index and all, that the EPP runs without them, so that a
// comparison with it isolates what the plugins add.
func withoutHeadroom(t testing.TB, config []byte) []byte {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	var kept []any
	plugins, _ := doc["plugins"].([]any)
	for _, p := range plugins {
		m, _ := p.(map[string]any)
		typ, _ := m["type"].(string)
		if !strings.HasPrefix(typ, "headroom-") {
			kept = append(kept, p)
			continue
		}
		name, _ := m["name"].(string)
		if name == "" {
			name = typ
		}
		removed[name] = true
	}
	if len(removed) == 0 {
		t.Fatal("the config has no Headroom plugin to remove")
	}
	doc["plugins"] = kept
	profiles, _ := doc["schedulingProfiles"].([]any)
	for _, p := range profiles {
		m, _ := p.(map[string]any)
		refs, _ := m["plugins"].([]any)
		var keptRefs []any
		for _, r := range refs {
			ref, _ := r.(map[string]any)["pluginRef"].(string)
			if !removed[ref] {
				keptRefs = append(keptRefs, r)
			}
		}
		m["plugins"] = keptRefs
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
