package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/headroomhq/headroom/lab/eval"
	"github.com/headroomhq/headroom/xgboost"
)

// A tiny suite end to end: generated, loaded back through its digests, and
// every trace × target × mode reported with its part and every baseline.
// It trains xgboost a few dozen times, so -short skips it.
func TestEvaluateTinySuite(t *testing.T) {
	if testing.Short() {
		t.Skip("trains xgboost models over and over; skipped with -short")
	}
	if _, err := exec.LookPath("xgboost"); err != nil {
		t.Skip("xgboost CLI not installed (apt-get install xgboost)")
	}
	dir := t.TempDir()
	if err := Generate(context.Background(), tinyManifest(), dir, false); err != nil {
		t.Fatal(err)
	}
	m, traces, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	opts := eval.Options{XGBoost: xgboost.CLI{TempDir: t.TempDir()}, TempDir: t.TempDir()}
	var progress bytes.Buffer
	rep, err := Evaluate(context.Background(), m, traces, opts, Settings{Floor: true}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Seeds != 1 || rep.Every != 100 {
		t.Errorf("settings %d seeds, every %d; the manifest says 1 and 100", rep.Seeds, rep.Every)
	}
	// 2 traces × 2 targets × 2 modes.
	if len(rep.Lines) != 8 {
		t.Fatalf("%d lines, want 8: %+v", len(rep.Lines), rep.Lines)
	}
	seen := map[string]bool{}
	for _, l := range rep.Lines {
		seen[l.Trace+" "+l.Target+" "+l.Mode] = true
		wantPart := PartTune
		if l.Trace == "large-model" {
			wantPart = PartHeldOut
		}
		if l.Part != wantPart {
			t.Errorf("%s: part %q, want %q", l.Trace, l.Part, wantPart)
		}
		if l.Rows == 0 || l.Coverage <= 0 || l.Coverage > 100 {
			t.Errorf("%+v: rows and coverage", l)
		}
		best := l.MAPE[l.Best]
		for _, b := range Baselines {
			v, ok := l.MAPE[b]
			if !ok || !(v > 0) {
				t.Errorf("%s %s %s: no %s figure", l.Trace, l.Target, l.Mode, b)
			}
			if v < best {
				t.Errorf("%s %s %s: best %s (%.2f) but %s has %.2f", l.Trace, l.Target, l.Mode, l.Best, best, b, v)
			}
		}
		if want := l.MAPE[eval.ModelHeadroom] / best; l.Ratio != want {
			t.Errorf("ratio %v, want %v", l.Ratio, want)
		}
		// The floor sits beside prequential lines only, and hindsight
		// reaches no higher than the walk that learns from the past.
		switch {
		case l.Mode == eval.ModeSplit && (l.Floor != 0 || l.FloorModel != ""):
			t.Errorf("%s %s split: a floor (%v, %q) beside a split line", l.Trace, l.Target, l.Floor, l.FloorModel)
		case l.Mode == eval.ModePrequential && !(l.Floor > 0 && l.FloorModel != ""):
			t.Errorf("%s %s prequential: no floor", l.Trace, l.Target)
		case l.Mode == eval.ModePrequential && l.FloorRatio != l.MAPE[eval.ModelHeadroom]/l.Floor:
			t.Errorf("%s %s: ratio to floor %v, want %v", l.Trace, l.Target, l.FloorRatio, l.MAPE[eval.ModelHeadroom]/l.Floor)
		}
	}
	if len(seen) != 8 {
		t.Errorf("lines repeat: %v", seen)
	}
	if got := strings.Count(progress.String(), "done in"); got != 6 {
		t.Errorf("%d progress lines, want one per replay and floor (6):\n%s", got, progress.String())
	}

	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"xgboost-log %", "held-out", "tune", "prequential", "split", "tune lines", "headroom / floor", "its floor on"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if n := strings.Count(table.String(), "LOSES"); n != len(rep.Losses()) {
		t.Errorf("table marks %d losses, report has %d", n, len(rep.Losses()))
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Lines) != 8 {
		t.Fatalf("JSON: %v, %d lines", err, len(back.Lines))
	}
}

func TestLossesAndTableVerdicts(t *testing.T) {
	rep := &Report{Seeds: 1, Every: 100, Quantile: 0.9, Lines: []Line{
		{Trace: "a", Part: PartTune, Target: "ttft", Mode: eval.ModeSplit, Rows: 10,
			MAPE: map[string]float64{eval.ModelHeadroom: 12, eval.ModelXGBoost: 10, eval.ModelXGBoostLog: 11, eval.ModelLinear: 13},
			Best: eval.ModelXGBoost, Ratio: 1.2, Coverage: 90},
		{Trace: "b", Part: PartHeldOut, Target: "tpot", Mode: eval.ModePrequential, Rows: 10,
			MAPE: map[string]float64{eval.ModelHeadroom: 3, eval.ModelXGBoost: 5, eval.ModelXGBoostLog: 4, eval.ModelLinear: 3.5},
			Best: eval.ModelLinear, Ratio: 3 / 3.5, Coverage: 89},
	}}
	if l := rep.Losses(); len(l) != 1 || l[0].Trace != "a" {
		t.Errorf("losses %+v", l)
	}
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"1.20x LOSES", "0.86x", "on 1 of 1 tune lines and 0 of 1 held-out lines"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "floor") {
		t.Errorf("a report without floors prints floor columns:\n%s", out)
	}

	// With a floor beside the prequential line, the table shows it and
	// counts the lines too far above theirs.
	rep.Lines[1].Floor, rep.Lines[1].FloorModel, rep.Lines[1].FloorRatio = 2.5, eval.ModelKNNWindow, 3/2.5
	buf.Reset()
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	out = buf.String()
	for _, want := range []string{"headroom / floor", "2.50", "1.20x", "above 1.15x its floor on 0 of 0 tune lines and 1 of 1 held-out lines"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
