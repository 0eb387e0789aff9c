package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/features"
)

// testTargetModel is a small, consistent residual model: a line with the
// committed small tree ensemble on top.
func testTargetModel(t testing.TB, trees bool) *TargetModel {
	t.Helper()
	cols := features.DefaultTPOTColumns
	n := len(cols)
	lin := &Linear{Intercept: 20, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	lin.Coef[features.MustSchema(cols...).Index("num_request_running")] = 0.5
	res := make([]float64, 200)
	for i := range res {
		res[i] = float64(i-100) / 500
	}
	cal, err := NewCalibration("holdout", res)
	if err != nil {
		t.Fatal(err)
	}
	m := &TargetModel{
		Kind: KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 1, MinMs: 0.5, MaxMs: 10000,
		Ranges: make([]Range, n), Calibration: cal, TrainSamples: 500, HoldoutSamples: 50,
		TrainedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC),
	}
	for i := range m.Ranges {
		m.Ranges[i] = Range{Min: 0, Max: 10}
	}
	if trees {
		tr := loadSmallModel(t)
		if tr.NumFeatures() <= n {
			m.Kind, m.Trees = KindResidual, tr
		}
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

func testBundle(t testing.TB) *Bundle {
	return &Bundle{Version: 7, CreatedAt: time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC),
		TTFT: testTargetModel(t, true), TPOT: testTargetModel(t, false)}
}

func TestBundleRoundTrip(t *testing.T) {
	b := testBundle(t)
	data, err := b.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 7 || got.Checksum != b.Checksum || got.Checksum == "" {
		t.Fatalf("decoded version %d checksum %q, want 7 and %q", got.Version, got.Checksum, b.Checksum)
	}
	row := features.Row{NumRequestRunning: 6, InputTokenLength: 300, KVCachePercentage: 0.2}
	for _, tg := range features.PodTargets {
		want, have := b.Target(tg), got.Target(tg)
		x := want.Schema().Build(&row, nil)
		if w, h := want.Predict(x), have.Predict(x); w != h {
			t.Errorf("%s: prediction %v after round trip, %v before", tg, h, w)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	b := testBundle(t)
	key := []byte("0123456789abcdef-key")
	signed, err := b.Encode(key)
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := b.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(data []byte, from, to string) []byte {
		if !bytes.Contains(data, []byte(from)) {
			t.Fatalf("test bug: %q not in bundle", from)
		}
		return bytes.Replace(data, []byte(from), []byte(to), 1)
	}
	// A payload edited and re-checksummed, to reach the checks after the checksum.
	rechecksum := func(edit func(map[string]any)) []byte {
		var env map[string]json.RawMessage
		json.Unmarshal(unsigned, &env)
		var payload map[string]any
		json.Unmarshal(env["payload"], &payload)
		edit(payload)
		nb := &Bundle{}
		raw, _ := json.Marshal(payload)
		if err := json.Unmarshal(raw, nb); err != nil {
			t.Fatal(err)
		}
		out, err := nb.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
		key  []byte
		want error
		msg  string
	}{
		{"not json", []byte("{"), nil, nil, "decode bundle"},
		{"other format", tamper(unsigned, BundleFormat, "pickle/1"), nil, nil, "format"},
		{"payload edited", tamper(unsigned, `"intercept":20`, `"intercept":21`), nil, ErrChecksum, ""},
		{"unsigned when a key is required", unsigned, key, ErrUnsigned, ""},
		{"signed with another key", signed, []byte("another-key-of-16+"), ErrBadSignature, ""},
		{"unknown column", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["columns"].([]any)[0] = "gpu_temperature"
		}), nil, nil, "unknown column"},
		{"unknown kind", rechecksum(func(p map[string]any) { p["tpot"].(map[string]any)["kind"] = "neural" }), nil, nil, "kind"},
		{"coefficients short", rechecksum(func(p map[string]any) {
			lin := p["tpot"].(map[string]any)["linear"].(map[string]any)
			lin["coef"] = lin["coef"].([]any)[1:]
		}), nil, nil, "coefficients"},
		{"zero scale", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["linear"].(map[string]any)["scale"].([]any)[0] = 0.0
		}), nil, nil, "scale"},
		{"ranges missing", rechecksum(func(p map[string]any) { p["tpot"].(map[string]any)["ranges"] = []any{} }), nil, nil, "ranges"},
		{"calibration not monotone", rechecksum(func(p map[string]any) {
			p["tpot"].(map[string]any)["calibration"].(map[string]any)["log_residuals"].([]any)[5] = 3.0
		}), nil, nil, "calibration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data, tt.key)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
		})
	}
	if _, err := Decode(signed, key); err != nil {
		t.Errorf("correctly signed bundle refused: %v", err)
	}
}

func TestTargetModelPredictIsClampedAndFinite(t *testing.T) {
	m := testTargetModel(t, false)
	huge := features.Row{NumRequestRunning: 1 << 50}
	neg := features.Row{NumRequestRunning: -1 << 50}
	for _, row := range []features.Row{huge, neg} {
		y := m.Predict(m.Schema().Build(&row, nil))
		if math.IsNaN(y) || y < m.MinMs || y > m.MaxMs {
			t.Errorf("prediction %v outside [%v, %v]", y, m.MinMs, m.MaxMs)
		}
	}
}

func TestLinearOriginalUnits(t *testing.T) {
	l := &Linear{Intercept: 3, Coef: []float64{2, -1}, Mean: []float64{10, 5}, Scale: []float64{4, 0.5}}
	b0, b := l.OriginalUnits()
	for _, x := range [][]float64{{0, 0}, {10, 5}, {3, -7}} {
		direct := l.Predict(x)
		orig := b0 + b[0]*x[0] + b[1]*x[1]
		if math.Abs(direct-orig) > 1e-9 {
			t.Errorf("x=%v: standardised %v, original units %v", x, direct, orig)
		}
	}
}

func TestWriteLoadPruneBundles(t *testing.T) {
	dir := t.TempDir()
	b := testBundle(t)
	for v := uint64(1); v <= 4; v++ {
		b.Version = v
		data, err := b.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := WriteBundle(dir, v, data); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt newest bundle is skipped, not served.
	if err := os.WriteFile(BundlePath(dir, 5), []byte(`{"format":"headroom-bundle/1","version":5,"sha256":"00","payload":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A leftover temporary file from a crash mid-write is ignored.
	if err := os.WriteFile(filepath.Join(dir, ".bundle-123.tmp"), []byte("half a bund"), 0o644); err != nil {
		t.Fatal(err)
	}
	var skipped []string
	pub, err := LoadNewestBundle(dir, nil, func(path string, err error) { skipped = append(skipped, path) })
	if err != nil {
		t.Fatal(err)
	}
	if pub == nil || pub.Bundle.Version != 4 || len(skipped) != 1 {
		t.Fatalf("loaded %+v, skipped %v; want version 4 and the corrupt 5 skipped", pub, skipped)
	}
	if err := PruneBundles(dir, 2); err != nil {
		t.Fatal(err)
	}
	vs, _ := BundleVersions(dir)
	if len(vs) != 2 || vs[0] != 5 || vs[1] != 4 {
		t.Errorf("after pruning to 2: versions %v, want [5 4]", vs)
	}
	if pub, err := LoadNewestBundle(t.TempDir(), nil, nil); pub != nil || err != nil {
		t.Errorf("empty dir: %v, %v", pub, err)
	}
}

func TestTreeDump(t *testing.T) {
	b := testBundle(t)
	data, _ := b.Encode(nil)
	pub := &Published{Bundle: b, Encoded: data}
	if b.TTFT.Trees == nil {
		t.Fatal("test bundle has no trees")
	}
	d1, err := pub.TreeDump(features.TTFT)
	if err != nil {
		t.Fatal(err)
	}
	var trees []map[string]any
	if err := json.Unmarshal(d1, &trees); err != nil || len(trees) != b.TTFT.Trees.NumTrees() {
		t.Fatalf("dump: %v, %d trees, want %d", err, len(trees), b.TTFT.Trees.NumTrees())
	}
	if d2, _ := pub.TreeDump(features.TTFT); &d1[0] != &d2[0] {
		t.Error("dump recomputed on the second call")
	}
	if _, err := pub.TreeDump(features.TPOT); err == nil {
		t.Error("dump of a linear model succeeded")
	}
}

// SamplesSeen counts the TTFT and TPOT models' training and holdout rows,
// not the transfer model's.
func TestBundleSamplesSeen(t *testing.T) {
	b := &Bundle{}
	if n := b.SamplesSeen(); n != 0 {
		t.Errorf("empty bundle saw %d samples", n)
	}
	b.TTFT = &TargetModel{TrainSamples: 500, HoldoutSamples: 50}
	b.TPOT = &TargetModel{TrainSamples: 300, HoldoutSamples: 30}
	b.Transfer = &TransferModel{TrainSamples: 1000, HoldoutSamples: 100}
	if n := b.SamplesSeen(); n != 880 {
		t.Errorf("saw %d samples, want 880", n)
	}
}
