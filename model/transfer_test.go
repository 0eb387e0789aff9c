package model

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

// testTransferModel knows two classes: same-rack (40 GB/s, 10 µs, full
// sharing) and cross-zone (3 GB/s, 0.5 ms, half sharing, with its own
// calibration), at 160 KiB per token.
func testTransferModel(t testing.TB) *TransferModel {
	t.Helper()
	res := make([]float64, 100)
	for i := range res {
		res[i] = float64(i-50) / 250 // ±20%
	}
	pooled, err := NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res {
		res[i] *= 2
	}
	wide, err := NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &TransferModel{
		DefaultBytesPerToken: 160 << 10, MinMs: 0.001, MaxMs: 600000, Calibration: pooled,
		Classes: []TransferClass{
			{Class: "same-rack", LatencyMs: 0.01, BytesPerSec: 40e9, Contention: 1, UnknownContention: 1.5,
				Tokens: Range{Min: 100, Max: 1024}, Samples: 300},
			{Class: "cross-zone", LatencyMs: 0.5, BytesPerSec: 3e9, Contention: 0.5, UnknownContention: 1,
				Tokens: Range{Min: 100, Max: 1024}, Samples: 200, Calibration: wide},
		},
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestTransferPredictIsTheBandwidthLaw(t *testing.T) {
	m := testTransferModel(t)
	const kib160 = 160 << 10
	bytes := func(tokens int64) float64 { return float64(tokens) * kib160 }
	for _, tc := range []struct {
		name       string
		class      features.LinkClass
		tokens     int64
		bpt        float64
		concurrent int64
		want       float64
	}{
		{"alone on the rack", features.SameRack, 1000, 0, 1, 0.01 + 1000*bytes(1000)/40e9},
		{"explicit bytes per token", features.SameRack, 1000, 2 * kib160, 1, 0.01 + 1000*2*bytes(1000)/40e9},
		{"four sharing the rack link", features.SameRack, 1000, 0, 4, 0.01 + 4*1000*bytes(1000)/40e9},
		{"unknown concurrency uses the learned factor", features.SameRack, 1000, 0, 0, 0.01 + 1.5*1000*bytes(1000)/40e9},
		{"beyond the fitted token range the law extrapolates", features.SameRack, 32768, 0, 1, 0.01 + 1000*bytes(32768)/40e9},
		{"cross zone, half sharing", features.CrossZone, 2000, 0, 3, 0.5 + 2*1000*bytes(2000)/3e9},
		{"nothing to move pays the latency", features.CrossZone, 0, 0, 1, 0.5},
		{"negative tokens move nothing", features.CrossZone, -5, 0, 1, 0.5},
		// Unseen same-zone sits between same-rack and cross-zone: it takes
		// the nearest farther seen class, cross-zone, as its upper bound.
		{"unseen same-zone borrows cross-zone", features.SameZone, 2000, 0, 3, 0.5 + 2*1000*bytes(2000)/3e9},
		// Unseen same-node has same-rack beyond it.
		{"unseen same-node borrows same-rack", features.SameNode, 1000, 0, 1, 0.01 + 1000*bytes(1000)/40e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := m.Predict(tc.class, tc.tokens, tc.bpt, tc.concurrent)
			if !ok {
				t.Fatal("ok = false")
			}
			if math.Abs(got-tc.want) > 1e-9*tc.want {
				t.Fatalf("got %v ms, want %v", got, tc.want)
			}
		})
	}
}

func TestTransferPredictRefusesWhatItCannotBound(t *testing.T) {
	m := testTransferModel(t)
	for _, c := range []features.LinkClass{features.CrossRegion, -1, features.NumLinkClasses} {
		if y, ok := m.Predict(c, 1000, 0, 1); ok {
			t.Errorf("%s: predicted %v, want ok=false: no seen class bounds it from above", c, y)
		}
	}
}

func TestTransferFartherIsNeverFaster(t *testing.T) {
	m := testTransferModel(t)
	// A fit where the farther class came out faster than the nearer one
	// (too few samples, say) must not rank it ahead.
	m.Classes[1].BytesPerSec = 400e9
	m.Classes[1].LatencyMs = 0
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	for _, tokens := range []int64{10, 1000, 100000} {
		near, _ := m.Predict(features.SameRack, tokens, 0, 2)
		far, ok := m.Predict(features.CrossZone, tokens, 0, 2)
		if !ok || far < near {
			t.Fatalf("%d tokens: cross-zone %v ms, same-rack %v ms", tokens, far, near)
		}
	}
}

func TestTransferQuantileUsesTheClassCalibration(t *testing.T) {
	m := testTransferModel(t)
	const central = 10.0
	rackP90 := m.Quantile(features.SameRack, central, 0.9)
	zoneP90 := m.Quantile(features.CrossZone, central, 0.9)
	if !(rackP90 > central && zoneP90 > rackP90) {
		t.Fatalf("p90: same-rack %v (pooled calibration), cross-zone %v (its own, twice as wide), central %v", rackP90, zoneP90, central)
	}
	if got := m.Quantile(features.SameZone, central, 0.9); got != zoneP90 {
		t.Errorf("unseen same-zone p90 %v, want cross-zone's %v whose law it borrows", got, zoneP90)
	}
	if got := m.Quantile(features.CrossRegion, central, 0.9); got != rackP90 {
		t.Errorf("unbounded cross-region p90 %v, want the pooled calibration's %v", got, rackP90)
	}
	if lo := m.Quantile(features.SameRack, central, 0.1); !(lo < central) {
		t.Errorf("p10 %v not below the central %v", lo, central)
	}
}

func TestTransferPrepareRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(m *TransferModel)
		want   string
	}{
		{"no classes", func(m *TransferModel) { m.Classes = nil }, "no link classes"},
		{"unknown class", func(m *TransferModel) { m.Classes[0].Class = "same-galaxy" }, "unknown link class"},
		{"class twice", func(m *TransferModel) { m.Classes[1].Class = "same-rack" }, "twice"},
		{"zero bandwidth", func(m *TransferModel) { m.Classes[0].BytesPerSec = 0 }, "bandwidth"},
		{"NaN bandwidth", func(m *TransferModel) { m.Classes[0].BytesPerSec = math.NaN() }, "bandwidth"},
		{"negative latency", func(m *TransferModel) { m.Classes[0].LatencyMs = -1 }, "latency"},
		{"negative contention", func(m *TransferModel) { m.Classes[0].Contention = -0.1 }, "contention"},
		{"unknown contention below one", func(m *TransferModel) { m.Classes[0].UnknownContention = 0.5 }, "unknown-contention"},
		{"no bytes per token", func(m *TransferModel) { m.DefaultBytesPerToken = 0 }, "bytes per token"},
		{"inverted clamps", func(m *TransferModel) { m.MinMs, m.MaxMs = 5, 1 }, "clamps"},
		{"decreasing class calibration", func(m *TransferModel) {
			m.Classes[1].Calibration.LogResiduals[3] = 10
		}, "decrease"},
		{"shared terms without coefficients", func(m *TransferModel) {
			m.Shared = &SharedTerms{Columns: []string{"effective_input_tokens"}}
		}, "coefficients"},
		{"shared terms of an unknown column", func(m *TransferModel) {
			m.Shared = &SharedTerms{Columns: []string{"moon_phase"}, MsPer: []float64{1}}
		}, "moon_phase"},
		{"a negative shared term", func(m *TransferModel) {
			m.Shared = &SharedTerms{Columns: []string{"effective_input_tokens"}, MsPer: []float64{-0.1}}
		}, "effective_input_tokens"},
		{"a shared term latency falls with", func(m *TransferModel) {
			m.Shared = &SharedTerms{Columns: []string{"prefix_cache_score"}, MsPer: []float64{1}}
		}, "prefix_cache_score"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testTransferModel(t)
			tc.break_(m)
			err := m.Prepare()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Prepare: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// A law's shared terms cost their columns of the row, with none 0; the
// link's part is Predict's alone.
func TestTransferSharedMs(t *testing.T) {
	m := testTransferModel(t)
	row := &features.Row{InputTokenLength: 1000, PrefixCacheScore: 0.25, NumRequestWaiting: 2}
	if got := m.SharedMs(row, nil); got != 0 {
		t.Fatalf("no shared terms: %v ms", got)
	}
	before, _ := m.Predict(features.SameRack, 1000, 0, 1)
	m.Shared = &SharedTerms{Columns: []string{"effective_input_tokens", "num_request_waiting"}, MsPer: []float64{0.05, 10}}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	if got, want := m.SharedMs(row, make([]float64, 0, 2)), 0.05*750+10*2; math.Abs(got-want) > 1e-9 {
		t.Errorf("shared part %v ms, want %v", got, want)
	}
	if after, _ := m.Predict(features.SameRack, 1000, 0, 1); after != before {
		t.Errorf("Predict %v with shared terms, %v without", after, before)
	}
}

// The /status line: {"ready": false} alone without a model; with one, its
// holdout figures and each class's.
func TestTransferStatus(t *testing.T) {
	var none *TransferModel
	if b, err := json.Marshal(none.Status()); err != nil || string(b) != `{"ready":false}` {
		t.Errorf("no transfer model: %s, %v", b, err)
	}
	m := testTransferModel(t)
	m.Holdout = Quality{MAPE: 4.5, Bias: -0.1, Rows: 80}
	m.TrainSamples = 500
	m.Classes[1].Holdout = Quality{MAPE: 6, Bias: 0.2, Rows: 30}
	b, err := json.Marshal(m.Status())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"ready": true, "holdout_mape": 4.5, "holdout_bias": -0.1, "holdout_rows": 80.0,
		"trained_on_samples": 500.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (%s)", k, got[k], v, b)
		}
	}
	if _, ok := got["holdout_coverage"]; ok {
		t.Errorf("coverage without one: %s", b)
	}
	zone, _ := got["classes"].(map[string]any)["cross-zone"].(map[string]any)
	for k, v := range map[string]any{"holdout_mape": 6.0, "holdout_bias": 0.2, "holdout_rows": 30.0, "bytes_per_sec": 3e9, "latency_ms": 0.5} {
		if zone[k] != v {
			t.Errorf("cross-zone %s = %v, want %v (%s)", k, zone[k], v, b)
		}
	}
}
