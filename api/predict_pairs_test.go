package api

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/headroomhq/headroom/predictor"
)

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
	// TTFT is what /predict says for its row.
	first := resp.NoSplit[0]
	row := `{"kv_cache_percentage":0.2,"input_token_length":900,"num_request_waiting":0,"num_request_running":2,"num_tokens_generated":0,"prefix_cache_score":0.1,"pod_type":"decode"}`
	single := decode(t, do(h, "POST", "/predict", row))
	if first.Decode != "d-0" || resp.Best.Decode != "d-0" || first.TTFT != single["ttft_ms"] || first.Headroom != 2000-first.TTFT ||
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
