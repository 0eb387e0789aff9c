package eval

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/features"
)

func sampleReport() *Report {
	c := 90.5
	return &Report{
		Mode: ModeSplit, Trace: "t.jsonl", Scheme: "kv10,prefix4", Quantile: 0.9, Seeds: 2,
		Results: []Result{
			{Target: "ttft", Model: ModelHeadroom, Rows: 10, MAPE: 10, MedianAPE: 8, P90APE: 20, Bias: -1, Coverage: &c, MAPESeeds: []float64{9, 11}},
			{Target: "ttft", Model: ModelXGBoost, Rows: 10, MAPE: 30, MedianAPE: 20, P90APE: 60, Bias: 2},
		},
	}
}

// The JSON is the interface other tools read: these keys, coverage null
// for models without quantiles.
func TestWriteJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, sampleReport()); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Mode    string           `json:"mode"`
		Trace   string           `json:"trace"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	if v.Mode != "split" || v.Trace != "t.jsonl" || len(v.Results) != 2 {
		t.Fatalf("decoded %+v", v)
	}
	for _, key := range []string{"target", "model", "rows", "mape", "median_ape", "p90_ape", "bias", "coverage"} {
		for i, r := range v.Results {
			if _, ok := r[key]; !ok {
				t.Errorf("result %d lacks %q", i, key)
			}
		}
	}
	if v.Results[0]["coverage"] != 90.5 || v.Results[1]["coverage"] != nil {
		t.Errorf("coverage %v and %v, want 90.5 and null", v.Results[0]["coverage"], v.Results[1]["coverage"])
	}
}

func TestWriteTable(t *testing.T) {
	r := sampleReport()
	r.EarlyLife = []Result{{Target: "tpot", Model: ModelConstant, Rows: 5, MAPE: 4}}
	r.Chosen = map[string]map[string]int{"ttft": {"line": 1, "configured": 3}}
	var buf bytes.Buffer
	if err := WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"mode split", "2 seeds", "headroom", "xgboost", "3.00x", "90.5", "early life", "constant",
		"ttft configurations chosen (models): configured×3, line×1"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestMeanResultsAveragesSeeds(t *testing.T) {
	c1, c2 := 88.0, 92.0
	got := meanResults([][]Result{
		{{Target: "ttft", Model: ModelHeadroom, Rows: 10, MAPE: 10, Bias: -2, Coverage: &c1}, {Target: "ttft", Model: ModelLinear, Rows: 10, MAPE: 20}},
		{{Target: "ttft", Model: ModelHeadroom, Rows: 12, MAPE: 14, Bias: 2, Coverage: &c2}, {Target: "ttft", Model: ModelLinear, Rows: 12, MAPE: 22}},
	})
	if len(got) != 2 {
		t.Fatalf("%d results, want 2", len(got))
	}
	h := got[0]
	if h.Model != ModelHeadroom || h.Rows != 22 || h.MAPE != 12 || h.Bias != 0 || h.Coverage == nil || *h.Coverage != 90 {
		t.Errorf("headroom mean %+v", h)
	}
	if len(h.MAPESeeds) != 2 || h.MAPESeeds[1] != 14 {
		t.Errorf("per-seed MAPE %v", h.MAPESeeds)
	}
	if got[1].Coverage != nil || got[1].MAPE != 21 {
		t.Errorf("linear mean %+v", got[1])
	}
}

func TestTallySkipsEmptyAndKeepsOrder(t *testing.T) {
	tl := newTally(ModelHeadroom, ModelXGBoost)
	tl.scores(features.TPOT, ModelXGBoost).add(11, 10)
	s := tl.scores(features.TTFT, ModelHeadroom)
	s.add(90, 100)
	s.addQuantile(120)
	tl.scores(features.TTFT, ModelConstant).add(1, 1) // not a listed model
	got := tl.results()
	if len(got) != 2 || got[0].Target != "ttft" || got[1].Target != "tpot" {
		t.Fatalf("results %+v", got)
	}
	if got[0].MAPE != 10 || got[0].Bias != -10 || got[0].Coverage == nil || *got[0].Coverage != 100 {
		t.Errorf("ttft headroom %+v", got[0])
	}
	if got[1].Coverage != nil {
		t.Errorf("xgboost has coverage %v", *got[1].Coverage)
	}
}

// A prequential report beside its floor: each target's lowest estimator,
// Headroom's MAPE over it, in the JSON and in the table; reports of other
// modes or cadences are refused, since their rows are not the same.
func TestBesideFloor(t *testing.T) {
	preq := &Report{Mode: ModePrequential, Every: 100, Quantile: 0.9, Results: []Result{
		{Target: "ttft", Model: ModelHeadroom, Rows: 10, MAPE: 12},
		{Target: "tpot", Model: ModelHeadroom, Rows: 10, MAPE: 4},
	}}
	floor := &Report{Mode: ModeFloor, Every: 100, Results: []Result{
		{Target: "ttft", Model: ModelHeadroomHindsight, Rows: 10, MAPE: 10},
		{Target: "ttft", Model: ModelKNN, Rows: 10, MAPE: 11},
		{Target: "tpot", Model: ModelHeadroomHindsight, Rows: 10, MAPE: 3.9},
		{Target: "tpot", Model: ModelKNNWindow, Rows: 10, MAPE: 3.2},
	}}
	if err := preq.BesideFloor(floor); err != nil {
		t.Fatal(err)
	}
	want := []FloorFigure{
		{Target: "ttft", Model: ModelHeadroomHindsight, MAPE: 10, Headroom: 12, Ratio: 1.2},
		{Target: "tpot", Model: ModelKNNWindow, MAPE: 3.2, Headroom: 4, Ratio: 4 / 3.2},
	}
	if len(preq.Floors) != len(want) {
		t.Fatalf("floors %+v, want %+v", preq.Floors, want)
	}
	for i := range want {
		if preq.Floors[i] != want[i] {
			t.Errorf("floor %d: %+v, want %+v", i, preq.Floors[i], want[i])
		}
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, preq); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"headroom / floor", "knn:window", "1.20x", "1.25x"} {
		if !strings.Contains(buf.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, buf.String())
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, preq); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"floors"`) || !strings.Contains(buf.String(), `"headroom_mape"`) {
		t.Errorf("JSON lacks the floors:\n%s", buf.String())
	}

	other := *floor
	other.Every = 50
	if err := preq.BesideFloor(&other); err == nil {
		t.Error("accepted a floor in blocks of 50 beside a walk retraining every 100")
	}
	split := &Report{Mode: ModeSplit}
	if err := split.BesideFloor(floor); err == nil {
		t.Error("accepted a floor beside a split report")
	}
	if _, ok := (&Report{Mode: ModeFloor}).Lowest(features.TTFT); ok {
		t.Error("an empty floor report has a lowest estimator")
	}
}
