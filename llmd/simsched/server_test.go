package simsched

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	stockConfig    = "../../../shared/upstream/llm-d-router/deploy/config/pd-topology-epp-config.yaml"
	headroomConfig = "../../deploy/llm-d/pd-headroom-epp-config.yaml"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	configs := map[string][]byte{}
	for name, path := range map[string]string{"llm-d": stockConfig, "headroom": headroomConfig} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("read %s: %v (the llm-d-router tree must be beside the repository, as CI has it)", path, err)
		}
		configs[name] = b
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, configs)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		s.Close()
		cancel()
	})
	return srv
}

// call sends body to the server and decodes the answer into out, failing
// the test unless the status is want.
func call(t *testing.T, srv *httptest.Server, method, path string, body, out any, want int) string {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
	return string(data)
}

func create(t *testing.T, srv *httptest.Server, config string, producer map[string]any) string {
	t.Helper()
	var a CreateAnswer
	call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: config, Producer: producer}, &a, http.StatusCreated)
	return "/routers/" + a.ID
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) int64 { return epoch.Add(d).UnixNano() }

func TestTokensSharePrefixesExactlyWhereBlocksDo(t *testing.T) {
	a := Request{ID: "1", PromptTokens: 70, BlockSize: 16, BlockHashes: []uint64{11, 22, 33}}
	b := Request{ID: "2", PromptTokens: 70, BlockSize: 16, BlockHashes: []uint64{11, 22, 44}}
	ta, tb := a.Tokens(), b.Tokens()
	if len(ta) != 70 || !slices.Equal(ta, a.Tokens()) {
		t.Fatalf("%d tokens, or not a function of the request", len(ta))
	}
	shared := 0
	for shared < len(ta) && ta[shared] == tb[shared] {
		shared++
	}
	if shared != 32 {
		t.Errorf("the prompts share %d leading tokens, want the 32 of their two common blocks", shared)
	}
	// Past the known blocks the tokens are the request's own.
	if slices.Equal(ta[48:], tb[48:]) {
		t.Error("the requests' unknown tails are equal")
	}
}

// fleet is two prefill and two decode pods; d0 shares a host with p0.
func fleet() []Endpoint {
	topo := func(node, rack string) Topology { return Topology{Node: node, Rack: rack, Zone: "za", Region: "eu"} }
	return []Endpoint{
		{Name: "p0", Role: "prefill", Topology: topo("n1", "r1")},
		{Name: "p1", Role: "prefill", Topology: topo("n2", "r2")},
		{Name: "d0", Role: "decode", Topology: topo("n1", "r1")},
		{Name: "d1", Role: "decode", Topology: topo("n3", "r2"), Waiting: 4, Running: 20, KVCache: 0.8},
	}
}

// request is a prompt of n tokens whose blocks are its own.
func request(id string, n int) Request {
	hashes := make([]uint64, n/16)
	for i := range hashes {
		hashes[i] = uint64(len(id))<<32 | uint64(id[0])<<40 | uint64(i+1)
	}
	return Request{ID: id, PromptTokens: n, BlockSize: 16, BlockHashes: hashes}
}

func TestStockConfigReadsTopologyFromPodLabels(t *testing.T) {
	srv := newServer(t)
	path := create(t, srv, "llm-d", nil)
	var a ScheduleAnswer
	call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(0), Request: request("1", 800), Endpoints: fleet()}, &a, http.StatusOK)
	// d1 is loaded, so the decode profile takes d0; topology-affinity-filter
	// (minAffinity host) then keeps p0 alone: the topology-extractor read
	// the pods' hostname labels.
	if a.Decode != "d0" || a.Prefill != "p0" {
		t.Errorf("picked (%s, %s), want (p0, d0)", a.Prefill, a.Decode)
	}
	// Its report has no Headroom plugin's counts.
	var r Report
	call(t, srv, http.MethodGet, path+"/report", nil, &r, http.StatusOK)
	if len(r.Decisions) != 0 {
		t.Errorf("report %+v", r)
	}
}

// TestPrefixIndexSizedToThePods: the prefix_index parameters reach llm-d's
// approximate prefix producer, whose match is the Headroom rows'
// prefix_cache_score. A prompt repeated on d0 after another is cached
// there under the config's index; an index sized to one prompt's five
// 64-token blocks has forgotten it, as a pod that evicted it has.
func TestPrefixIndexSizedToThePods(t *testing.T) {
	srv := newServer(t)
	for _, tt := range []struct {
		index  map[string]any
		cached bool
	}{
		{nil, true},
		{map[string]any{"autoTune": false, "blockSizeTokens": 64, "lruCapacityPerServer": 5}, false},
	} {
		rec := &recorder{}
		fake := httptest.NewServer(rec)
		var created CreateAnswer
		call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: "headroom", PrefixIndex: tt.index,
			Producer: map[string]any{"predictorURL": fake.URL, "timeout": "5s"}}, &created, http.StatusCreated)
		path := "/routers/" + created.ID
		first, again := request("a", 264), request("a", 264)
		again.ID = "b"
		var a ScheduleAnswer
		call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(0), Request: first, Endpoints: fleet()}, &a, http.StatusOK)
		if a.Decode != "d0" {
			t.Fatalf("index %v: first request on %s, want d0 (the fake ranks it first)", tt.index, a.Decode)
		}
		// llm-d adds the blocks to its index asynchronously; the router
		// waits for that before it answers (settle.go), so no pause is
		// needed for the next request to see them.
		call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(time.Second), Request: request("c", 264), Endpoints: fleet()}, &a, http.StatusOK)
		call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(2 * time.Second), Request: again, Endpoints: fleet()}, &a, http.StatusOK)
		score := rec.rows[4]["prefix_cache_score"].(float64) // d0's row of the third request
		if (score > 0) != tt.cached {
			t.Errorf("index %v: d0's prefix_cache_score for the repeated prompt %v, want cached %v", tt.index, score, tt.cached)
		}
		fake.Close()
	}
}

// recorder is a fake predictor (a matrix answer that ranks the pairs
// through d0 first) and trainer, recording what it is sent.
type recorder struct {
	mu      sync.Mutex
	rows    []map[string]any // decode candidates of every /predict/pairs call
	entries []map[string]any
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch r.URL.Path {
	case "/predict/pairs":
		var req struct {
			Prefill, Decode []map[string]any
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		rec.rows = append(rec.rows, req.Decode...)
		nP, nD := len(req.Prefill), len(req.Decode)
		rank := make([][]int, nD)
		ttft := make([][]float64, nD)
		for j := range rank {
			for i := range nP {
				rank[j] = append(rank[j], j*nP+i)
				ttft[j] = append(ttft[j], float64(100+j*nP+i))
			}
		}
		alone := make([]int, nD)
		aloneTTFT := make([]float64, nD)
		for j := range alone {
			alone[j], aloneTTFT[j] = nP*nD+j, 900
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"split": true, "kv_transfer_model": true, "matrix": map[string]any{
			"rank": rank, "ttft_ms": ttft, "no_split_rank": alone, "no_split_ttft_ms": aloneTTFT, "tpot_ms": make([]float64, nD),
			"prefill_extrapolated": make([]bool, nP), "decode_extrapolated": make([]bool, nD)}})
	case "/add_training_data_bulk":
		var b struct {
			Entries []map[string]any `json:"entries"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		rec.entries = append(rec.entries, b.Entries...)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{}`))
	default:
		http.NotFound(w, r)
	}
}

func TestHeadroomConfigOnTheSimulatorsClock(t *testing.T) {
	srv := newServer(t)
	rec := &recorder{}
	fake := httptest.NewServer(rec)
	defer fake.Close()
	path := create(t, srv, "headroom", map[string]any{"predictorURL": fake.URL, "trainerURL": fake.URL,
		"streamingMode": true, "flushInterval": "24h", "timeout": "5s"})

	var a ScheduleAnswer
	call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(time.Second), Request: request("1", 800), Endpoints: fleet()}, &a, http.StatusOK)
	// The fake ranks (p0, d0) first, although llm-d's topology filter is
	// gone: the Headroom scorers picked.
	if a.Decode != "d0" || a.Prefill != "p0" {
		t.Fatalf("picked (%s, %s), want (p0, d0)", a.Prefill, a.Decode)
	}
	// A second request while the first is in flight sees it in d0's row:
	// llm-d's in-flight load producer counts it.
	call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(1100 * time.Millisecond), Request: request("2", 800), Endpoints: fleet()}, &a, http.StatusOK)
	if got := rec.rows[2]["num_request_running"]; got != 1.0 {
		t.Errorf("d0's row on the second request: num_request_running %v, want the first request, in flight", got)
	}

	// The first answer streams: its first token 250 ms after dispatch
	// (20.5 ms of it the transfer), five tokens, the last 40 ms later. The
	// TTFT entry is posted at the first token, as llm-d's producer records
	// it, not a whole decode later.
	call(t, srv, http.MethodPost, path+"/events", EventsRequest{Flush: true, Events: []Event{
		{Kind: FirstToken, ID: "1", AtNs: at(1250 * time.Millisecond), TransferMs: 20.5},
	}}, nil, http.StatusNoContent)
	if len(rec.entries) != 1 {
		t.Fatalf("%d entries posted at the first token, want the TTFT entry: %v", len(rec.entries), rec.entries)
	}
	call(t, srv, http.MethodPost, path+"/events", EventsRequest{Flush: true, Events: []Event{
		{Kind: End, ID: "1", AtNs: at(1290 * time.Millisecond), OutputTokens: 5},
	}}, nil, http.StatusNoContent)
	if len(rec.entries) != 2 {
		t.Fatalf("%d entries posted, want a TTFT and a TPOT entry: %v", len(rec.entries), rec.entries)
	}
	ttft, tpot := rec.entries[0], rec.entries[1]
	if ttft["actual_ttft_ms"] != 250.0 || ttft["actual_kv_transfer_ms"] != 20.5 || ttft["pod_type"] != "prefill" ||
		!strings.HasSuffix(ttft["decode_pod"].(string), "/d0") || ttft["timestamp"] != "2026-01-01T00:00:01.25Z" {
		t.Errorf("TTFT entry %v", ttft)
	}
	if tpot["actual_tpot_ms"] != 10.0 || tpot["pod_type"] != "decode" {
		t.Errorf("TPOT entry %v, want (40 ms / 4 tokens) on the decode row", tpot)
	}

	var r Report
	call(t, srv, http.MethodGet, path+"/report", nil, &r, http.StatusOK)
	if r.Decisions["scored"] != 2 || r.TrainingEntries["posted"] != 2 {
		t.Errorf("report %+v", r)
	}
	// The first request ended: a third sees only the second in flight.
	call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{NowNs: at(2 * time.Second), Request: request("3", 800), Endpoints: fleet()}, &a, http.StatusOK)
	if got := rec.rows[len(rec.rows)-2]["num_request_running"]; got != 1.0 {
		t.Errorf("d0's row after the first request ended: num_request_running %v, want 1", got)
	}
}

func TestErrors(t *testing.T) {
	srv := newServer(t)
	call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: "nope"}, nil, http.StatusNotFound)
	call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: "llm-d", Producer: map[string]any{"timeout": "1s"}}, nil, http.StatusBadRequest)
	call(t, srv, http.MethodPost, "/routers/99/schedule", ScheduleRequest{}, nil, http.StatusNotFound)
	path := create(t, srv, "llm-d", nil)
	for name, body := range map[string]any{
		"an event of no request": ScheduleRequest{Events: []Event{{Kind: End, ID: "7"}}, Request: request("1", 100), Endpoints: fleet()},
		"no endpoints":           ScheduleRequest{Request: request("1", 100)},
		"too many block hashes":  ScheduleRequest{Request: Request{ID: "1", PromptTokens: 20, BlockSize: 16, BlockHashes: []uint64{1, 2}}, Endpoints: fleet()},
		"an unknown field":       map[string]any{"request": request("1", 100), "endpoints": fleet(), "bogus": 1},
	} {
		t.Run(name, func(t *testing.T) {
			call(t, srv, http.MethodPost, path+"/schedule", body, nil, http.StatusBadRequest)
		})
	}
	call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{Request: request("1", 100), Endpoints: fleet()}, nil, http.StatusOK)
	got := call(t, srv, http.MethodPost, path+"/schedule", ScheduleRequest{Request: request("1", 100), Endpoints: fleet()}, nil, http.StatusBadRequest)
	if !strings.Contains(got, "already scheduled") {
		t.Errorf("rescheduling a request in flight: %s", got)
	}
	call(t, srv, http.MethodDelete, path, nil, nil, http.StatusNoContent)
	call(t, srv, http.MethodGet, path+"/report", nil, nil, http.StatusNotFound)
	for range maxRouters {
		create(t, srv, "llm-d", nil)
	}
	got = call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: "llm-d"}, nil, http.StatusBadRequest)
	if !strings.Contains(got, fmt.Sprint(maxRouters)) {
		t.Errorf("past the router bound: %s", got)
	}
}

// TestRoutersOfOneSeedPickAlike: on four idle decode pods, each on a node
// of its own, every score ties, so llm-d's picker would pick at random
// from the wall clock; two routers of one seed pick the same pods request
// after request, and the picks are not all one pod.
func TestRoutersOfOneSeedPickAlike(t *testing.T) {
	srv := newServer(t)
	var pods []Endpoint
	for i := range 4 {
		for _, role := range []string{"prefill", "decode"} {
			pods = append(pods, Endpoint{Name: fmt.Sprintf("%s%d", role[:1], i), Role: role,
				Topology: Topology{Node: fmt.Sprintf("n%s%d", role[:1], i), Zone: "za", Region: "eu"}})
		}
	}
	picks := func(seed uint64) []string {
		var a CreateAnswer
		call(t, srv, http.MethodPost, "/routers", CreateRequest{Config: "llm-d", Seed: seed}, &a, http.StatusCreated)
		var out []string
		for i, id := range strings.Split("abcdefghijkl", "") {
			var ans ScheduleAnswer
			// Each request ends before the next, so no load is left.
			var events []Event
			if i > 0 {
				prev := string("abcdefghijkl"[i-1])
				events = []Event{{Kind: FirstToken, ID: prev, AtNs: at(time.Duration(i) * time.Second)},
					{Kind: End, ID: prev, AtNs: at(time.Duration(i) * time.Second), OutputTokens: 2}}
			}
			call(t, srv, http.MethodPost, "/routers/"+a.ID+"/schedule", ScheduleRequest{Events: events,
				NowNs: at(time.Duration(i)*time.Second + 1), Request: request(id, 800), Endpoints: pods}, &ans, http.StatusOK)
			out = append(out, ans.Prefill+ans.Decode)
		}
		call(t, srv, http.MethodDelete, "/routers/"+a.ID, nil, nil, http.StatusNoContent)
		return out
	}
	first, again := picks(3), picks(3)
	if !slices.Equal(first, again) {
		t.Errorf("seed 3 picked %v, then %v", first, again)
	}
	distinct := map[string]bool{}
	for _, p := range first {
		distinct[p] = true
	}
	if len(distinct) < 2 {
		t.Errorf("seed 3 picked %v: every tie broken the same way", first)
	}
}
