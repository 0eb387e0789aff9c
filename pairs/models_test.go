package pairs

import (
	"math"
	"testing"

	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/predictor"
)

// lineModel is a linear model over cols, y = intercept + Σ coef[name]·x[name],
// whose calibrated error is log-uniform within ±spread.
func lineModel(t testing.TB, cols []string, intercept float64, coef map[string]float64, spread float64) *model.TargetModel {
	t.Helper()
	s := features.MustSchema(cols...)
	n := s.Len()
	lin := &model.Linear{Intercept: intercept, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	for name, c := range coef {
		i := s.Index(name)
		if i < 0 {
			t.Fatalf("no column %s", name)
		}
		lin.Coef[i] = c
	}
	res := make([]float64, 1001)
	for i := range res {
		res[i] = spread * (float64(i)/500 - 1)
	}
	cal, err := model.NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TargetModel{Kind: model.KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 0.1, MinMs: 0.1,
		MaxMs: 1e7, Ranges: make([]model.Range, n), Calibration: cal}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

// testModels: TTFT = 10 + 0.1 ms per uncached prompt token + 100 ms per
// waiting request; TPOT = 20 + 1 ms per running request. Transfers move
// bytes at each class's bandwidth.
func testModels(t testing.TB, transfer TransferModel) Models {
	t.Helper()
	return Models{
		TTFT: lineModel(t, features.DefaultTTFTColumns, 10,
			map[string]float64{"effective_input_tokens": 0.1, "num_request_waiting": 100}, 0.2),
		TPOT: lineModel(t, features.DefaultTPOTColumns, 20,
			map[string]float64{"num_request_running": 1}, 0.1),
		Transfer:  transfer,
		Statistic: predictor.Statistic{Objective: predictor.Mean, Quantile: 0.9},
	}
}

// bandwidthModel is a fake transfer model: a fixed latency plus bytes over
// each known class's bandwidth (bytes per ms), with a log-uniform error of
// ±spread. It records the last call.
type bandwidthModel struct {
	bytesPerMs map[features.LinkClass]float64
	latencyMs  float64
	poolBytes  float64 // bytes per token when the request says 0
	spread     float64
	// sharedMsPerUncached is the law's shared part (SharedMs) per
	// uncached prompt token of the prefill row; 0: none.
	sharedMsPerUncached float64
	calls               int
	lastTokens          int64
	lastBytes           float64
	lastParallel        int64
}

func (m *bandwidthModel) Predict(c features.LinkClass, tokens int64, bytesPerToken float64, concurrent int64) (float64, bool) {
	m.calls++
	m.lastTokens, m.lastBytes, m.lastParallel = tokens, bytesPerToken, concurrent
	bw, ok := m.bytesPerMs[c]
	if !ok {
		return 0, false
	}
	if bytesPerToken == 0 {
		bytesPerToken = m.poolBytes
	}
	return m.latencyMs + float64(tokens)*bytesPerToken*float64(max(concurrent, 1))/bw, true
}

func (m *bandwidthModel) SharedMs(r *features.Row, _ []float64) float64 {
	return m.sharedMsPerUncached * (1 - r.PrefixCacheScore) * float64(r.InputTokenLength)
}

func (m *bandwidthModel) Quantile(c features.LinkClass, central, q float64) float64 {
	return central * math.Exp(m.spread*(2*q-1))
}

// links: NVLink-like within a node down to a slow WAN between regions.
func links() *bandwidthModel {
	return &bandwidthModel{
		bytesPerMs: map[features.LinkClass]float64{
			features.SameNode: 100e6, features.SameRack: 25e6, features.SameZone: 10e6,
			features.CrossZone: 2e6, features.CrossRegion: 0.5e6,
		},
		latencyMs: 1, poolBytes: 128 << 10, spread: 0.3,
	}
}

func TestFromBundle(t *testing.T) {
	m := testModels(t, nil)
	stat := predictor.Statistic{Objective: predictor.Quantile, Quantile: 0.8}
	got := FromBundle(&model.Bundle{TTFT: m.TTFT, TPOT: m.TPOT}, stat)
	if got.TTFT != m.TTFT || got.TPOT != m.TPOT || got.Statistic != stat || got.Transfer != nil {
		t.Fatalf("FromBundle = %+v", got)
	}
	if got := FromBundle(nil, stat); got.TTFT != nil || got.TPOT != nil {
		t.Fatalf("FromBundle(nil) = %+v", got)
	}
	tm := &model.TransferModel{}
	if got := FromBundle(&model.Bundle{TTFT: m.TTFT, TPOT: m.TPOT, Transfer: tm}, stat); got.Transfer != tm {
		t.Fatalf("FromBundle with a transfer model = %+v", got)
	}
}
