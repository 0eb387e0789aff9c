package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
)

// pairsTransferModel is a transfer law for every link class, from NVLink
// within a node to a WAN between regions, at 160 KiB a token, ±20%.
func pairsTransferModel(tb testing.TB) *model.TransferModel {
	tb.Helper()
	res := make([]float64, 100)
	for i := range res {
		res[i] = float64(i-50) / 250
	}
	cal, err := model.NewCalibration("holdout", res)
	if err != nil {
		tb.Fatal(err)
	}
	m := &model.TransferModel{DefaultBytesPerToken: 160 << 10, MinMs: 0.001, MaxMs: 600000, Calibration: cal}
	for _, k := range []struct {
		class      string
		latencyMs  float64
		bytesPerS  float64
		contention float64
	}{{"same-node", 0.005, 300e9, 1}, {"same-rack", 0.01, 40e9, 1}, {"same-zone", 0.05, 20e9, 1},
		{"cross-zone", 0.5, 3e9, 0.5}, {"cross-region", 20, 0.5e9, 0.5}} {
		m.Classes = append(m.Classes, model.TransferClass{Class: k.class, LatencyMs: k.latencyMs, BytesPerSec: k.bytesPerS,
			Contention: k.contention, UnknownContention: 1.2, Tokens: model.Range{Min: 100, Max: 8192}, Samples: 200})
	}
	if err := m.Prepare(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// withTransfer puts p's bundle back in service with transfer model m.
func withTransfer(tb testing.TB, p *predictor.Predictor, m *model.TransferModel) {
	tb.Helper()
	pub, at := p.Current()
	b := *pub.Bundle
	b.Version++
	b.Checksum += "+transfer"
	b.Transfer = m
	if !p.Swap(&bundle.Published{Bundle: &b}, at) {
		tb.Fatal("bundle with a transfer model not swapped in")
	}
}

// pairsCandidates is a JSON list of n candidates named prefix-i, two to
// a rack, busier as i grows.
func pairsCandidates(prefix string, n int) string {
	var cs []string
	for i := range n {
		cs = append(cs, fmt.Sprintf(`{"pod":"%s-%d","topology":{"node":"%s-n%d","rack":"r%d","zone":"z1","region":"eu"},`+
			`"kv_cache_percentage":0.2,"num_request_waiting":%d,"num_request_running":%d,"prefix_cache_score":0.1}`,
			prefix, i, prefix, i, i/2, i%3, 2+i))
	}
	return "[" + strings.Join(cs, ",") + "]"
}

func pairsRequestBody(nP, nD int, extra string) string {
	return `{"input_token_length":900` + extra + `,"prefill":` + pairsCandidates("p", nP) + `,"decode":` + pairsCandidates("d", nD) + `}`
}

func TestPredictPairsRoute(t *testing.T) {
	s := newService(t, Tokens{})
	reg := prometheus.NewRegistry()
	h := NewPredictorHandler(s.pred, PredictorOptions{Limits: Limits{MaxPairCandidates: 3}, Registry: reg})

	if w := do(h, "POST", "/predict/pairs", pairsRequestBody(2, 2, "")); w.Code != 503 || !strings.HasPrefix(decode(t, w)["detail"].(string), "Models not ready") {
		t.Fatalf("before a model: %d %s", w.Code, w.Body)
	}
	// Bad input is refused before the models are asked, with paths.
	w := do(h, "POST", "/predict/pairs", pairsRequestBody(4, 0, ""))
	if w.Code != 422 {
		t.Fatalf("4 prefill and no decode candidates: %d %s", w.Code, w.Body)
	}
	var detail struct {
		Detail []struct {
			Type string `json:"type"`
			Loc  []any  `json:"loc"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &detail); err != nil || len(detail.Detail) != 2 ||
		detail.Detail[0].Type != "too_long" || detail.Detail[1].Type != "too_short" ||
		fmt.Sprint(detail.Detail[0].Loc) != "[body prefill]" || fmt.Sprint(detail.Detail[1].Loc) != "[body decode]" {
		t.Errorf("422 body %s", w.Body)
	}

	s.ingestAndTrain(t, 300)
	w = do(h, "POST", "/predict/pairs", pairsRequestBody(3, 3, `,"ttft_slo_ms":2000,"k":2`))
	if w.Code != 200 {
		t.Fatalf("pairs: %d %s", w.Code, w.Body)
	}
	var resp struct {
		Split    bool   `json:"split"`
		RankedBy string `json:"ranked_by"`
		Best     struct {
			Decode string  `json:"decode_pod"`
			TTFT   float64 `json:"ttft_ms"`
			Meets  bool    `json:"meets_slo"`
		} `json:"best"`
		Pairs   []map[string]any `json:"pairs"`
		NoSplit []struct {
			Decode   string    `json:"decode_pod"`
			TTFT     float64   `json:"ttft_ms"`
			Bounds   []float64 `json:"ttft_prediction_bounds"`
			Headroom float64   `json:"ttft_headroom_ms"`
		} `json:"no_split"`
		Total    int  `json:"total_pairs"`
		Unknown  int  `json:"unknown_transfer_pairs"`
		Transfer bool `json:"kv_transfer_model"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("%v in %s", err, w.Body)
	}
	// A bundle without a transfer model ranks the decode pods alone.
	if resp.Split || resp.Transfer || len(resp.Pairs) != 0 || resp.Total != 9 || resp.Unknown != 9 || len(resp.NoSplit) != 2 ||
		resp.RankedBy != "slo_headroom" {
		t.Fatalf("answer %s", w.Body)
	}
	// The first no-split option is the least busy decode pod, and its
	// TTFT is what /predict says for its row, to the microsecond.
	first := resp.NoSplit[0]
	row := `{"kv_cache_percentage":0.2,"input_token_length":900,"num_request_waiting":0,"num_request_running":2,"num_tokens_generated":0,"prefix_cache_score":0.1,"pod_type":"decode"}`
	single := decode(t, do(h, "POST", "/predict", row))
	if first.Decode != "d-0" || resp.Best.Decode != "d-0" || math.Abs(first.TTFT-single["ttft_ms"].(float64)) > 0.0005 ||
		math.Abs(first.Headroom-(2000-first.TTFT)) > 0.0011 ||
		!(first.Bounds[0] < first.TTFT && first.TTFT < first.Bounds[1]) || !resp.Best.Meets {
		t.Errorf("first no-split option %+v, best %+v; /predict says %v", first, resp.Best, single["ttft_ms"])
	}

	rec := httptest.NewRecorder()
	do(h, "GET", "/metrics", "").Body.WriteTo(rec)
	for _, series := range []string{
		`headroom_predict_pairs_best_total{best="no_split"} 1`,
		`headroom_predict_pairs_count{kind="considered"} 1`,
		`headroom_predict_not_ready_total{route="/predict/pairs"} 1`,
		`headroom_http_requests_total{code="422",method="POST",route="/predict/pairs",server="predictor"} 1`,
	} {
		if !strings.Contains(rec.Body.String(), series) {
			t.Errorf("metrics lack %s", series)
		}
	}
}

func TestPredictPairsWithATransferModel(t *testing.T) {
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 300)
	withTransfer(t, s.pred, pairsTransferModel(t))
	h := NewPredictorHandler(s.pred, PredictorOptions{})
	cand := func(pod, node, rack, zone string, running int) string {
		return fmt.Sprintf(`{"pod":%q,"topology":{"node":%q,"rack":%q,"zone":%q,"region":"eu"},`+
			`"kv_cache_percentage":0.2,"num_request_waiting":0,"num_request_running":%d,"prefix_cache_score":0.5}`, pod, node, rack, zone, running)
	}
	// The idle prefill pod is in another zone; the busy one shares the
	// decode pod's rack. 4,000 tokens of 160 KiB, half cached on the
	// decode pod, is 328 MB: 6 ms on the rack, 109 ms across zones.
	body := `{"input_token_length":4000,"prefill":[` + cand("p-far", "n1", "r1", "z2", 0) + `,` + cand("p-near", "n2", "r1", "z1", 20) +
		`],"decode":[` + cand("d", "n3", "r1", "z1", 29) + `]}`
	w := do(h, "POST", "/predict/pairs", body)
	if w.Code != 200 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	type estimate struct {
		Ms     float64    `json:"ttft_ms"`
		Bounds [2]float64 `json:"ttft_prediction_bounds"`
	}
	var resp struct {
		Split    bool `json:"split"`
		Transfer bool `json:"kv_transfer_model"`
		Unknown  int  `json:"unknown_transfer_pairs"`
		Pairs    []struct {
			estimate
			Prefill        string     `json:"prefill_pod"`
			Link           string     `json:"link_class"`
			Tokens         int64      `json:"kv_transfer_tokens"`
			PrefillMs      float64    `json:"prefill_ms"`
			TransferMs     float64    `json:"kv_transfer_ms"`
			TransferBounds [2]float64 `json:"kv_transfer_prediction_bounds"`
			DecodeLoadMs   *float64   `json:"decode_load_ms"`
			Extrapolated   *bool      `json:"extrapolated"`
		} `json:"pairs"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
		t.Fatalf("%v in %s", err, w.Body)
	}
	if !resp.Transfer || resp.Unknown != 0 || len(resp.Pairs) != 2 {
		t.Fatalf("answer %s", w.Body)
	}
	near, far := resp.Pairs[0], resp.Pairs[1]
	if near.Prefill != "p-near" || near.Link != "same-rack" || far.Link != "cross-zone" || near.Tokens != 2000 ||
		!(far.PrefillMs < near.PrefillMs) || !(far.TransferMs > 100 && near.TransferMs < 10) {
		t.Errorf("pairs %+v", resp.Pairs)
	}
	for _, p := range resp.Pairs {
		if p.DecodeLoadMs == nil {
			t.Fatalf("pair %+v: no decode load", p)
		}
		if sum := p.PrefillMs + p.TransferMs + *p.DecodeLoadMs; math.Abs(p.Ms-sum) > 0.002 || // each rounded to the µs
			!(p.TransferBounds[0] < p.TransferMs && p.TransferMs < p.TransferBounds[1]) {
			t.Errorf("pair %+v: TTFT is not its parts' sum", p)
		}
		if p.Extrapolated == nil {
			t.Errorf("pair %+v: no extrapolated flag", p)
		}
	}

	// The matrix answer carries the same options by candidate: ranks in the
	// order of the lists, TTFT as there.
	matrix := strings.Replace(body, `{"input_token_length":4000,`, `{"input_token_length":4000,"matrix":true,`, 1)
	w = do(h, "POST", "/predict/pairs", matrix)
	var m struct {
		Split  bool `json:"split"`
		Matrix struct {
			Rank        [][]int     `json:"rank"`
			TTFT        [][]float64 `json:"ttft_ms"`
			NoSplitRank []int       `json:"no_split_rank"`
		} `json:"matrix"`
		Pairs []any `json:"pairs"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &m); w.Code != 200 || err != nil {
		t.Fatalf("%d %v %s", w.Code, err, w.Body)
	}
	if m.Split != resp.Split || m.Pairs != nil || len(m.Matrix.Rank) != 1 || m.Matrix.TTFT[0][1] != near.Ms || m.Matrix.TTFT[0][0] != far.Ms ||
		!(m.Matrix.Rank[0][1] < m.Matrix.Rank[0][0]) || (m.Matrix.NoSplitRank[0] == 0) == resp.Split {
		t.Errorf("matrix answer %s against lists %s", w.Body, body)
	}
}

// TestPredictPairsLearnsTheTransfer is the loop end to end: split requests'
// samples with their measured transfers go in through the trainer's route,
// a retrain fits the transfer law, and the predictor ranks pairs with it.
func TestPredictPairsLearnsTheTransfer(t *testing.T) {
	s := newService(t, Tokens{})
	place, bytesPerSec := pairsPlaces, pairsBytesPerSec
	var es []string
	for i := range 120 {
		link := "same-rack"
		if i%2 == 1 {
			link = "cross-zone"
		}
		tokens := 500 + 30*i
		ms := 0.5 + float64(tokens)*(160<<10)/bytesPerSec[link]*1000*(1+0.02*float64(i%5-2))
		es = append(es, pairsSplitEntry(link, tokens, i%30, 100+float64(i%30)+ms, ms))
	}
	if w := do(s.trainerH, "POST", "/add_training_data_bulk", `{"entries":[`+strings.Join(es, ",")+`]}`); w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
	s.ingestAndTrain(t, 300)
	if pub, _ := s.pred.Current(); pub.Bundle.Transfer == nil {
		t.Fatal("no transfer model after a retrain with 60 transfers per class")
	}

	cand := pairsCandidate
	body := `{"input_token_length":4000,"prefill":[` + cand("p-far", place["cross-zone"]) + `,` +
		cand("p-abroad", `{"node":"n9","rack":"r1","zone":"z1","region":"us"}`) + `,` + cand("p-near", place["same-rack"]) +
		`],"decode":[` + cand("d", place["d"]) + `]}`
	w := do(s.predictH, "POST", "/predict/pairs", body)
	var resp struct {
		Transfer     bool     `json:"kv_transfer_model"`
		Unknown      int      `json:"unknown_transfer_pairs"`
		UnknownLinks []string `json:"unknown_link_classes"`
		Pairs        []struct {
			Prefill    string  `json:"prefill_pod"`
			Link       string  `json:"link_class"`
			TransferMs float64 `json:"kv_transfer_ms"`
		} `json:"pairs"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	// Cross-region lies beyond every class the trainer saw: unknown, not
	// guessed. The near pair wins on the transfer alone (same rows).
	if !resp.Transfer || resp.Unknown != 1 || fmt.Sprint(resp.UnknownLinks) != "[cross-region]" || len(resp.Pairs) != 2 ||
		resp.Pairs[0].Prefill != "p-near" || resp.Pairs[1].Link != "cross-zone" {
		t.Fatalf("answer %s", w.Body)
	}
	// The learned laws put each transfer of 4,000 tokens within 10% of the
	// truth.
	for i, bw := range []float64{40e9, 3e9} {
		want := 0.5 + 4000*(160<<10)/bw*1000
		if got := resp.Pairs[i].TransferMs; math.Abs(got-want) > 0.1*want {
			t.Errorf("%s transfer %v ms, want about %v", resp.Pairs[i].Link, got, want)
		}
	}
}

func TestPredictPairsStatistic(t *testing.T) {
	// A predictor serving a quantile ranks on it.
	s := newService(t, Tokens{})
	s.ingestAndTrain(t, 300)
	pub, at := s.pred.Current()
	q, _ := predictor.New(predictor.Quantile, 0.9)
	q.Swap(pub, at)
	body := pairsRequestBody(1, 1, "")
	mean := decode(t, do(NewPredictorHandler(s.pred, PredictorOptions{}), "POST", "/predict/pairs", body))
	high := decode(t, do(NewPredictorHandler(q, PredictorOptions{}), "POST", "/predict/pairs", body))
	m, h := mean["best"].(map[string]any)["ttft_ms"].(float64), high["best"].(map[string]any)["ttft_ms"].(float64)
	if !(h > m) || high["objective_type"] != "quantile" {
		t.Errorf("p90 TTFT %v, mean %v (%v)", h, m, high["objective_type"])
	}
}

// TestPredictPairsLearnsSplitTTFTWithoutTransferTiming is the loop end to
// end from entries as llm-d's sidecar reports them today: split requests
// with both placements, the tokens that move and the request's TTFT, but
// no actual_kv_transfer_ms, and requests the decode pods served alone. The
// bundle has no transfer model yet /predict/pairs ranks the pairs, the
// faster link first, and decides split against no split.
func TestPredictPairsLearnsSplitTTFTWithoutTransferTiming(t *testing.T) {
	s := newService(t, Tokens{})
	place, bytesPerSec := pairsPlaces, pairsBytesPerSec
	var es []string
	for i := range 240 {
		link := "same-rack"
		if i%2 == 1 {
			link = "cross-zone"
		}
		tokens := 500 + 15*i
		noise := 1 + 0.02*float64(i%5-2)
		transfer := 0.5 + float64(tokens)*(160<<10)/bytesPerSec[link]*1000
		ttft := (40 + 0.01*float64(tokens) + transfer) * noise
		es = append(es, pairsSplitEntry(link, tokens, i%30, ttft, 0))
		// The decode pod alone: its own prefill, slower per token than the
		// prefill pods', and its decode.
		es = append(es, fmt.Sprintf(`{"kv_cache_percentage":0.1,"input_token_length":%d,"num_request_waiting":0,"num_request_running":%d,`+
			`"num_tokens_generated":0,"prefix_cache_score":0,"pod_type":"decode","actual_ttft_ms":%g,"actual_tpot_ms":%g}`,
			tokens, i%30, (60+0.03*float64(tokens)+2*float64(i%30))*noise, 10+float64(i%30)/10))
	}
	if w := do(s.trainerH, "POST", "/add_training_data_bulk", `{"entries":[`+strings.Join(es, ",")+`]}`); w.Code != 202 {
		t.Fatalf("ingest: %d %s", w.Code, w.Body)
	}
	if c := s.db.Counts(); c.Train(features.KVTransfer)+c.Holdout(features.KVTransfer) != 0 ||
		c.Train(features.SplitTTFT)+c.Holdout(features.SplitTTFT) != 240 {
		t.Fatalf("stored %d transfers and %d split TTFTs, want 0 and 240", c.Train(features.KVTransfer)+c.Holdout(features.KVTransfer),
			c.Train(features.SplitTTFT)+c.Holdout(features.SplitTTFT))
	}
	pub, err := s.trainer.Retrain(context.Background())
	if err != nil || pub == nil {
		t.Fatalf("retrain: %v %v", pub, err)
	}
	s.pred.Swap(pub, pub.Bundle.CreatedAt)
	if b := pub.Bundle; b.Transfer != nil || b.SplitTTFT == nil || b.TTFT == nil || b.TPOT == nil {
		t.Fatalf("bundle: transfer %v, split TTFT %v, TTFT %v, TPOT %v", b.Transfer != nil, b.SplitTTFT != nil, b.TTFT != nil, b.TPOT != nil)
	}
	info := decode(t, do(s.predictH, "GET", "/model/info", ""))
	if st, _ := info["split_ttft"].(map[string]any); st["ready"] != true {
		t.Fatalf("/model/info split_ttft: %v", info["split_ttft"])
	}

	cand := pairsCandidate
	type option struct {
		Prefill string  `json:"prefill_pod"`
		Split   bool    `json:"split"`
		Link    string  `json:"link_class"`
		TTFT    float64 `json:"ttft_ms"`
		Law     float64 `json:"split_ttft_ms"`
	}
	var resp struct {
		Transfer bool     `json:"kv_transfer_model"`
		Split    bool     `json:"split_ttft_model"`
		Unknown  int      `json:"unknown_transfer_pairs"`
		Pairs    []option `json:"pairs"`
		NoSplit  []option `json:"no_split"`
	}
	ask := func(prefill ...string) {
		t.Helper()
		body := `{"input_token_length":4000,"prefill":[` + strings.Join(prefill, ",") + `],"decode":[` + cand("d", place["d"]) + `]}`
		w := do(s.predictH, "POST", "/predict/pairs", body)
		resp.Pairs, resp.NoSplit = nil, nil
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
			t.Fatalf("%d %s: %v", w.Code, w.Body, err)
		}
		if resp.Transfer || !resp.Split || resp.Unknown != 0 || len(resp.NoSplit) != 1 {
			t.Fatalf("answer %s", w.Body)
		}
	}
	// Truth at 4,000 tokens: same rack 40 + 40 + 16.9 ms, cross zone
	// 40 + 40 + 219 ms, the decode pod alone 60 + 120 + 6 ms.
	ask(cand("p-far", place["cross-zone"]), cand("p-near", place["same-rack"]))
	if len(resp.Pairs) != 2 || resp.Pairs[0].Prefill != "p-near" || resp.Pairs[1].Link != "cross-zone" ||
		!(resp.Pairs[0].TTFT < resp.NoSplit[0].TTFT) {
		t.Fatalf("with a near prefill pod: pairs %+v, no split %+v", resp.Pairs, resp.NoSplit)
	}
	for i, want := range []float64{40 + 40 + 0.5 + 4000*(160<<10)/40e9*1000, 40 + 40 + 0.5 + 4000*(160<<10)/3e9*1000} {
		if got := resp.Pairs[i].TTFT; math.Abs(got-want) > 0.1*want || resp.Pairs[i].Law != got {
			t.Errorf("%s pair TTFT %v ms (law %v), want about %v", resp.Pairs[i].Link, got, resp.Pairs[i].Law, want)
		}
	}
	if got, want := resp.NoSplit[0].TTFT, 60+0.03*4000+6.0; math.Abs(got-want) > 0.2*want {
		t.Errorf("no-split TTFT %v ms, want about %v", got, want)
	}
	ask(cand("p-far", place["cross-zone"]))
	if len(resp.Pairs) != 1 || !(resp.NoSplit[0].TTFT < resp.Pairs[0].TTFT) {
		t.Fatalf("with only a far prefill pod: pairs %+v, no split %+v", resp.Pairs, resp.NoSplit)
	}
}

// pairsPlaces are the decode pod "d" and a prefill pod on each link class
// from it of the end-to-end pairs tests, and pairsBytesPerSec the links'
// bandwidths.
var (
	pairsPlaces = map[string]string{
		"d":          `{"node":"n3","rack":"r1","zone":"z1","region":"eu"}`,
		"same-rack":  `{"node":"n2","rack":"r1","zone":"z1","region":"eu"}`,
		"cross-zone": `{"node":"n1","rack":"r1","zone":"z2","region":"eu"}`,
	}
	pairsBytesPerSec = map[string]float64{"same-rack": 40e9, "cross-zone": 3e9}
)

// pairsSplitEntry is the training entry of a split request of tokens
// prompt tokens, its prefill pod on link (a key of pairsPlaces) from the
// decode pod "d" with running requests, and its TTFT: with the transfer's
// time and bytes per token when transferMs > 0, and without them, as
// llm-d's sidecar reports it, when transferMs is 0.
func pairsSplitEntry(link string, tokens, running int, ttftMs, transferMs float64) string {
	timing := ""
	if transferMs > 0 {
		timing = fmt.Sprintf(`"actual_kv_transfer_ms":%g,"kv_bytes_per_token":163840,`, transferMs)
	}
	return fmt.Sprintf(`{"kv_cache_percentage":0.1,"input_token_length":%d,"num_request_waiting":0,"num_request_running":%d,`+
		`"num_tokens_generated":0,"prefix_cache_score":0,"pod_type":"prefill","actual_ttft_ms":%g,"actual_tpot_ms":0,`+
		`%s"kv_transfer_tokens":%d,"prefill_pod":"p-%s","decode_pod":"d",`+
		`"prefill_topology":%s,"decode_topology":%s,"concurrent_transfers":1}`,
		tokens, running, ttftMs, timing, tokens, link, pairsPlaces[link], pairsPlaces["d"])
}

// pairsCandidate is a /predict/pairs candidate with three running
// requests, at topology.
func pairsCandidate(pod, topology string) string {
	return fmt.Sprintf(`{"pod":%q,"topology":%s,"kv_cache_percentage":0.1,"num_request_waiting":0,"num_request_running":3,`+
		`"prefix_cache_score":0}`, pod, topology)
}
