package api

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	if !p.Swap(&model.Published{Bundle: &b}, at) {
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
			FirstDecodeMs  float64    `json:"first_decode_ms"`
			TPOTMs         float64    `json:"tpot_ms"`
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
		if sum := p.PrefillMs + p.TransferMs + p.FirstDecodeMs; math.Abs(p.Ms-sum) > 0.002 || // each rounded to the µs p.FirstDecodeMs != p.TPOTMs ||
			!(p.TransferBounds[0] < p.TransferMs && p.TransferMs < p.TransferBounds[1]) {
			t.Errorf("pair %+v: TTFT is not its parts' sum", p)
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
