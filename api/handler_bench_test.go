package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
	"github.com/headroomhq/headroom/predictor"
	"github.com/headroomhq/headroom/wire"
)

// benchTreeModel is a linear+log-trees model over cols with numTrees
// complete trees of the given depth: every walk goes to the full depth, the
// slowest case for the model size. Thresholds are feature values of random
// rows, so walks branch as on real data.
func benchTreeModel(tb testing.TB, cols []string, seed uint64, numTrees, depth int) *model.TargetModel {
	tb.Helper()
	s := features.MustSchema(cols...)
	n := s.Len()
	r := rand.New(rand.NewPCG(seed, 1))
	rows, _, errs := wire.DecodeBulkPredictRequest(benchRows(256), 0, true, nil)
	if len(errs) > 0 {
		tb.Fatal(errs)
	}
	trees, err := modeltest.CompleteTrees(r, s, rows, numTrees, depth)
	if err != nil {
		tb.Fatal(err)
	}
	lin := &model.Linear{Intercept: 50, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range n {
		lin.Coef[i], lin.Scale[i] = r.Float64(), 1+r.Float64()*1000
	}
	res := make([]float64, 500)
	for i := range res {
		res[i] = r.NormFloat64() * 0.2
	}
	cal, err := model.NewCalibration("holdout", res)
	if err != nil {
		tb.Fatal(err)
	}
	m := &model.TargetModel{Kind: model.KindResidual, Columns: cols, Linear: lin, Trees: trees, BaseFloorMs: 1,
		MinMs: 0.1, MaxMs: 1e6, Ranges: make([]model.Range, n), Calibration: cal}
	if err := m.Prepare(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// benchPredictor serves 200 complete trees of depth 6 per target: the
// default model size before the accuracy work made it depth 3, and the
// size the handler figures in docs/PERFORMANCE.md were taken with.
func benchPredictor(tb testing.TB) *predictor.Predictor {
	p, _ := predictor.New(predictor.Mean, 0.9)
	b := &model.Bundle{Version: 1, CreatedAt: time.Now(),
		TTFT: benchTreeModel(tb, features.DefaultTTFTColumns, 1, 200, 6),
		TPOT: benchTreeModel(tb, features.DefaultTPOTColumns, 2, 200, 6)}
	p.Swap(&bundle.Published{Bundle: b}, time.Now())
	return p
}

// cpuTime is the process's CPU time so far, user and system, in ns. On a
// shared machine a benchmark's wall time per op grows with every other
// tenant; its CPU time per op much less, so the handler benchmark reports
// both.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// discard is a ResponseWriter that keeps nothing but the status, so the
// benchmark measures the handler, not a recorder.
type discard struct {
	header http.Header
	status int
	n      int
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(code int)        { d.status = code }
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// BenchmarkBulkStrictHandler is the whole /predict/bulk/strict handler in
// process, without the network: routing, metrics, body read, decode,
// prediction with 200-tree models for both targets, encoding. One op is
// one request.
func BenchmarkBulkStrictHandler(b *testing.B) {
	h := NewPredictorHandler(benchPredictor(b), PredictorOptions{})
	for _, n := range []int{1, 10, 100, 10000} {
		body := benchRows(n)
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			rd := bytes.NewReader(body)
			req, err := http.NewRequest(http.MethodPost, "/predict/bulk/strict", nil)
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.RemoteAddr = "127.0.0.1:40000" // a real request has one; the bounds per client read it
			nop := io.NopCloser(rd)
			req.ContentLength = int64(len(body))
			w := &discard{header: http.Header{}}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				rd.Reset(body)
				req.Body = nop // the handler wraps the body it reads (bounds on arriving bytes)
				clear(w.header)
				w.status, w.n = 0, 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK {
					b.Fatalf("status %d", w.status)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/row")
			// CPU time per request: the 10,000-row case spreads over every
			// core, so its wall time is less than this.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkEncodeBulk compares the hand-written response encoder with
// encoding/json on the same response.
func BenchmarkEncodeBulk(b *testing.B) {
	type predJSON struct {
		TTFTMs          float64    `json:"ttft_ms"`
		TPOTMs          float64    `json:"tpot_ms"`
		TTFTUncertainty float64    `json:"ttft_uncertainty"`
		TPOTUncertainty float64    `json:"tpot_uncertainty"`
		TTFTBounds      [2]float64 `json:"ttft_prediction_bounds"`
		TPOTBounds      [2]float64 `json:"tpot_prediction_bounds"`
		PredictedAt     string     `json:"predicted_at"`
		ModelType       string     `json:"model_type"`
		ObjectiveType   string     `json:"objective_type"`
		Quantile        float64    `json:"quantile"`
		LastModelLoad   string     `json:"last_model_load"`
	}
	type respJSON struct {
		Predictions           []predJSON `json:"predictions"`
		TotalRequests         int        `json:"total_requests"`
		SuccessfulPredictions int        `json:"successful_predictions"`
		FailedPredictions     int        `json:"failed_predictions"`
		ProcessingTimeMs      float64    `json:"processing_time_ms"`
	}
	p := benchPredictor(b)
	now := time.Now()
	meta := wire.PredictionMeta{PredictedAt: wire.AppendTimestamp(nil, now), Objective: "mean", Quantile: wire.AppendFloat(nil, 0.9), LastLoad: wire.Timestamp(now)}
	for _, n := range []int{10, 100, 10000} {
		rows, _, errs := wire.DecodeBulkPredictRequest(benchRows(n), 0, true, nil)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		preds := make([]wire.Prediction, n)
		if _, err := p.Predict(rows, preds); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("rows=%d/append", n), func(b *testing.B) {
			var out []byte
			b.ReportAllocs()
			for b.Loop() {
				out = wire.AppendBulkResponse(out[:0], preds, &meta, 0.25)
			}
			b.SetBytes(int64(len(out)))
		})
		b.Run(fmt.Sprintf("rows=%d/encoding_json", n), func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				resp := respJSON{Predictions: make([]predJSON, n), TotalRequests: n, SuccessfulPredictions: n, ProcessingTimeMs: 0.25}
				for i, pr := range preds {
					resp.Predictions[i] = predJSON{pr.TTFTMs, pr.TPOTMs, pr.TTFTUncertainty, pr.TPOTUncertainty,
						pr.TTFTBounds, pr.TPOTBounds, string(meta.PredictedAt), wire.ModelType, meta.Objective, 0.9, meta.LastLoad}
				}
				out, err := json.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				size = len(out)
			}
			b.SetBytes(int64(size))
		})
	}
}

// benchRows is a /predict/bulk/strict body of n rows of a chat workload,
// written as the router writes it.
func benchRows(n int) []byte {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	rows := make([]features.Row, n)
	for i := range rows {
		rows[i] = features.Row{
			KVCachePercentage: r.Float64() * 0.9, InputTokenLength: 1 + r.Int64N(4000),
			NumRequestWaiting: r.Int64N(8), NumRequestRunning: r.Int64N(64), NumTokensGenerated: 1,
			PrefixCacheScore: float64(r.IntN(64)) / 64, PrefillTokensInFlight: r.Int64N(20000),
		}
		if i%4 == 0 {
			rows[i].PodType = "decode"
		}
	}
	return wire.AppendPredictRequest(nil, rows)
}
