package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A small sweep: its JSON has one entry per rate with every policy (the
// oracles included) on the same arrivals, and its charts are SVG files.
func TestSweepJSONAndPlots(t *testing.T) {
	opts := Options{Servers: 2, Duration: 10 * time.Second, Warmup: 10 * time.Second, Seed: 3,
		SLO: SLO{TTFTMs: 150}, PredictTimeout: 10 * time.Second, Service: ServiceOptions{NoXGBoost: true}}
	s, err := RunSweep(context.Background(), opts, []float64{2, 4})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteSweepJSON(&buf, s); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Servers int `json:"servers"`
		Seed    int `json:"seed"`
		SLO     SLO `json:"slo"`
		Sweep   []struct {
			Rate     float64                   `json:"rate"`
			Requests int                       `json:"requests"`
			Policies map[string]map[string]any `json:"policies"`
		} `json:"sweep"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	if doc.Servers != 2 || doc.Seed != 3 || doc.SLO.TTFTMs != 150 || len(doc.Sweep) != 2 {
		t.Fatalf("sweep %+v", doc)
	}
	for i, want := range []float64{2, 4} {
		pt := doc.Sweep[i]
		if pt.Rate != want || len(pt.Policies) != len(PoliciesFor(opts.SLO)) {
			t.Errorf("point %d: rate %v with %d policies", i, pt.Rate, len(pt.Policies))
		}
		for _, name := range PoliciesFor(opts.SLO) {
			p := pt.Policies[name]
			if p == nil {
				t.Errorf("rate %v: no policy %s", pt.Rate, name)
				continue
			}
			if n, _ := p["requests"].(float64); int(n) != pt.Requests {
				t.Errorf("rate %v %s: %v requests, the point has %d", pt.Rate, name, p["requests"], pt.Requests)
			}
			if v, _ := p["ttft_p95_ms"].(float64); !(v > 0) {
				t.Errorf("rate %v %s: ttft_p95_ms %v", pt.Rate, name, p["ttft_p95_ms"])
			}
			if a, ok := p["slo_attainment"].(float64); !ok || a < 0 || a > 1 {
				t.Errorf("rate %v %s: slo_attainment %v", pt.Rate, name, p["slo_attainment"])
			}
		}
		if _, ok := pt.Policies[Oracle]["lookahead"]; !ok {
			t.Errorf("rate %v: the oracle reports no lookahead work", pt.Rate)
		}
		if _, ok := pt.Policies[Predicted]["regret"]; !ok {
			t.Errorf("rate %v: the predicted policy reports no regret", pt.Rate)
		}
	}
	if pred := s.Policy(0, Predicted); len(pred.Points) != pred.Requests {
		t.Errorf("%d scatter points for %d requests routed on predictions", len(pred.Points), pred.Requests)
	}

	dir := t.TempDir()
	paths, err := WritePlots(dir, s)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{PlotTTFTP50, PlotTTFTP95, PlotSLO, PlotPredicted}
	if len(paths) != len(want) {
		t.Fatalf("wrote %v, want %v", paths, want)
	}
	for i, name := range want {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || paths[i] != filepath.Join(dir, name) {
			t.Fatalf("%s: %v (paths %v)", name, err, paths)
		}
		if !bytes.HasPrefix(data, []byte("<?xml")) || !bytes.Contains(data, []byte("<svg")) {
			t.Errorf("%s is not SVG: %.80q", name, data)
		}
	}
	if svg, _ := os.ReadFile(filepath.Join(dir, PlotTTFTP95)); !bytes.Contains(svg, []byte(">"+Oracle+"<")) {
		t.Errorf("the TTFT chart has no %s line in its legend", Oracle)
	}

	var table bytes.Buffer
	if err := WriteSweepTable(&table, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TTFT p95 (ms)", "SLO attainment", OracleSLO} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestParseRates(t *testing.T) {
	got, err := ParseRates("4, 8,12.5")
	if err != nil || len(got) != 3 || got[2] != 12.5 {
		t.Errorf("ParseRates: %v, %v", got, err)
	}
	for _, bad := range []string{"", "4,,8", "4,-1", "0", "x", "inf"} {
		if _, err := ParseRates(bad); err == nil {
			t.Errorf("ParseRates(%q): no error", bad)
		}
	}
}
