package demo

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeScheduler plays the sim-scheduler (llmd/simsched): every request to
// (prefill-1, decode-0), recording what the demo sends.
type fakeScheduler struct {
	mu       sync.Mutex
	creates  []llmdCreate
	byRouter map[string][]string // calls per router path, in order: "schedule ID", "first_token ID", "end ID", "flush"
	lastAt   map[string]int64    // the latest time each router was told
	errs     []string
	// transfers are the transfer times of the first tokens, by request.
	transfers map[string]float64
	endpoints []llmdEndpoint
}

func (f *fakeScheduler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(what string) { f.errs = append(f.errs, r.Method+" "+r.URL.Path+": "+what) }
	path := r.URL.Path
	events := func(evs []llmdEvent) {
		for _, ev := range evs {
			if ev.AtNs < f.lastAt[routerOf(path)] {
				fail("an event before the last call's time")
			}
			f.lastAt[routerOf(path)] = ev.AtNs
			f.byRouter[routerOf(path)] = append(f.byRouter[routerOf(path)], ev.Kind+" "+ev.ID)
			if ev.Kind == "first_token" {
				f.transfers[ev.ID] = ev.TransferMs
			}
		}
	}
	switch {
	case r.Method == http.MethodPost && path == "/routers":
		var c llmdCreate
		_ = json.NewDecoder(r.Body).Decode(&c)
		f.creates = append(f.creates, c)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": string(rune('0' + len(f.creates)))})
	case strings.HasSuffix(path, "/schedule"):
		var s llmdSchedule
		_ = json.NewDecoder(r.Body).Decode(&s)
		events(s.Events)
		if s.NowNs < f.lastAt[routerOf(path)] {
			fail("a request scheduled before the last event")
		}
		f.lastAt[routerOf(path)] = s.NowNs
		f.byRouter[routerOf(path)] = append(f.byRouter[routerOf(path)], "schedule "+s.Request.ID)
		f.endpoints = s.Endpoints
		_ = json.NewEncoder(w).Encode(llmdPicks{Decode: "decode-0", Prefill: "prefill-1"})
	case strings.HasSuffix(path, "/events"):
		var e llmdEvents
		_ = json.NewDecoder(r.Body).Decode(&e)
		events(e.Events)
		if e.Flush {
			f.byRouter[routerOf(path)] = append(f.byRouter[routerOf(path)], "flush")
		}
		w.WriteHeader(http.StatusNoContent)
	case strings.HasSuffix(path, "/report"):
		_ = json.NewEncoder(w).Encode(llmdReport{Decisions: map[string]int{"scored": 5, "no_model": 3, "extrapolated": 1}})
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func routerOf(path string) string { return strings.Join(strings.Split(path, "/")[:3], "/") }

func llmdTestOptions(url string) LLMDOptions {
	o := LLMDOptions{PDOptions: DefaultPDOptions(), SchedulerURL: url}
	o.Layout, o.PrefillPods, o.DecodePods = "zones", 2, 2
	o.Rate, o.Duration, o.Warmup = 4, 10*time.Second, 5*time.Second
	o.Service.NoXGBoost = true
	return o
}

// The loop's side of the demo: a router per run, of the config the run is;
// every request scheduled once, with the candidates' state, and its first
// token and end told afterwards, in time order, the producers flushed on
// the demo's cadence; llm-d's picks taken; the plugins' fallbacks and the
// transfers in the result.
func TestLLMDLoop(t *testing.T) {
	for _, timing := range []bool{true, false} {
		f := &fakeScheduler{byRouter: map[string][]string{}, lastAt: map[string]int64{}, transfers: map[string]float64{}}
		srv := httptest.NewServer(f)
		opts := llmdTestOptions(srv.URL)
		opts.NoTransferTiming = !timing
		res, err := RunLLMD(t.Context(), opts)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(f.errs) > 0 {
			t.Fatalf("timing %v: %v", timing, f.errs)
		}
		var configs []string
		for _, c := range f.creates {
			configs = append(configs, c.Config)
			if c.Config == LLMDHeadroom {
				p := c.Producer
				if !strings.HasPrefix(p["predictorURL"].(string), "http://127.0.0.1:") || !strings.HasPrefix(p["trainerURL"].(string), "http://127.0.0.1:") ||
					p["streamingMode"] != true || p["flushInterval"] != "24h" {
					t.Errorf("headroom producer parameters %v", p)
				}
			} else if c.Producer != nil {
				t.Errorf("llm-d's config given producer parameters %v", c.Producer)
			}
			// Both configs' prefix index holds what a pod's KV cache does
			// (the default engine's 14 500 16-token blocks) in llm-d's
			// 64-token blocks, not llm-d's sample's 31 250.
			if x := c.PrefixIndex; x["autoTune"] != false || x["blockSizeTokens"] != 64.0 || x["lruCapacityPerServer"] != 3625.0 {
				t.Errorf("%s's prefix index parameters %v", c.Config, x)
			}
		}
		if strings.Join(configs, ",") != "headroom,llm-d,headroom" {
			t.Errorf("routers of %v, want the warm-up's, then llm-d's and headroom's", configs)
		}
		// Each run's calls: every request scheduled once, then its first
		// token and its end.
		for path, calls := range f.byRouter {
			seen := map[string]int{}
			flushes := 0
			for _, c := range calls {
				if c == "flush" {
					flushes++
					continue
				}
				kind, id, _ := strings.Cut(c, " ")
				want := map[string]int{"schedule": 0, "first_token": 1, "end": 2}[kind]
				if seen[id] != want {
					t.Errorf("%s: %s at step %d of request %s", path, kind, seen[id], id)
				}
				seen[id]++
			}
			for id, n := range seen {
				if n != 3 {
					t.Errorf("%s: request %s had %d of its 3 calls", path, id, n)
				}
			}
			if path == "/routers/2" && flushes != 0 {
				t.Errorf("llm-d's config flushed %d times: it posts no entries", flushes)
			}
			if path != "/routers/2" && flushes < 5 {
				t.Errorf("%s: %d flushes in a run of 10 s at 1 s", path, flushes)
			}
		}
		for id, x := range f.transfers {
			if (x > 0) != timing {
				t.Fatalf("timing %v: request %s's first token told a transfer of %v ms", timing, id, x)
			}
		}
		if len(f.endpoints) != 4 || f.endpoints[0].Name != "prefill-0" || f.endpoints[0].Role != "prefill" ||
			f.endpoints[3].Name != "decode-1" || f.endpoints[3].Topology.Zone == "" {
			t.Errorf("endpoints %+v", f.endpoints)
		}

		// The JSON: llm-d's picks taken (prefill-1 is in zone-b, decode-0
		// in zone-a in the zones layout), the plugins' fallbacks.
		var out bytes.Buffer
		if err := WriteLLMDJSON(&out, res); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Layout  string                    `json:"layout"`
			Seed    uint64                    `json:"seed"`
			Configs map[string]map[string]any `json:"configs"`
		}
		var top map[string]any
		if err := json.Unmarshal(out.Bytes(), &top); err != nil || json.Unmarshal(out.Bytes(), &doc) != nil {
			t.Fatalf("%v: %s", err, out.Bytes())
		}
		if doc.Layout != "zones" || doc.Seed != 1 || len(top) != 3 || len(doc.Configs) != 3 {
			t.Errorf("top level %v", top)
		}
		for _, name := range LLMDConfigs {
			c := doc.Configs[name]
			for _, k := range []string{"requests", "ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "slo_attainment", "fallbacks", "transfers_by_link"} {
				if _, ok := c[k]; !ok {
					t.Errorf("%s: no %s in %v", name, k, c)
				}
			}
			if len(c) != 8 {
				t.Errorf("%s: fields %v", name, c)
			}
		}
		h, l := res.Configs[LLMDHeadroom], res.Configs[LLMDStock]
		if h.Fallbacks["no_model"] != 3 || h.Fallbacks["extrapolated"] != 1 || len(h.Fallbacks) != 2 || len(l.Fallbacks) != 0 {
			t.Errorf("fallbacks: headroom %v, llm-d %v", h.Fallbacks, l.Fallbacks)
		}
		if l.Requests == 0 || l.TransfersByLink["cross-zone"] != l.Requests || h.TransfersByLink["cross-zone"] != h.Requests {
			t.Errorf("transfers: llm-d %v of %d, headroom %v of %d", l.TransfersByLink, l.Requests, h.TransfersByLink, h.Requests)
		}
	}
}

// A pick that is not a pod of the role fails the run rather than routing
// somewhere.
func TestLLMDLoopRefusesBadPicks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/routers":
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"1"}`))
		case strings.HasSuffix(r.URL.Path, "/schedule"):
			_, _ = w.Write([]byte(`{"decode":"prefill-0"}`))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	_, err := RunLLMD(t.Context(), llmdTestOptions(srv.URL))
	if err == nil || !strings.Contains(err.Error(), `decode pick "prefill-0" is not a decode pod`) {
		t.Errorf("err %v", err)
	}
}
