package wire

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/headroomhq/headroom/bundle"
	"github.com/headroomhq/headroom/features"
	"github.com/headroomhq/headroom/model"
	"github.com/headroomhq/headroom/model/modeltest"
)

// infoModel is a prepared per-pod model of DefaultTPOTColumns, trained on
// 500 rows and measured on 50: with trees when trees is set.
func infoModel(t *testing.T, trees bool) *model.TargetModel {
	t.Helper()
	cols := features.DefaultTPOTColumns
	n := len(cols)
	lin := &model.Linear{Intercept: 20, Coef: make([]float64, n), Mean: make([]float64, n), Scale: make([]float64, n)}
	for i := range lin.Scale {
		lin.Scale[i] = 1
	}
	cal, err := model.NewCalibration("holdout", []float64{-0.2, -0.1, 0, 0.1, 0.2})
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TargetModel{Kind: model.KindLinear, Columns: cols, Linear: lin, BaseFloorMs: 1, MinMs: 0.5, MaxMs: 10000,
		Ranges: make([]model.Range, n), Calibration: cal, TrainSamples: 500, HoldoutSamples: 50,
		TrainedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	for i := range m.Ranges {
		m.Ranges[i] = model.Range{Min: 0, Max: 10}
	}
	if trees {
		rows := []features.Row{{NumRequestRunning: 3}, {NumRequestRunning: 7, InputTokenLength: 500}}
		if m.Trees, err = modeltest.CompleteTrees(rand.New(rand.NewPCG(1, 2)), features.MustSchema(cols...), rows, 4, 2); err != nil {
			t.Fatal(err)
		}
		m.Kind = model.KindResidual
	}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

// infoBundle is version 7 of a bundle created at 12:00:01, TTFT with trees
// and TPOT a line.
func infoBundle(t *testing.T) *model.Bundle {
	return &model.Bundle{Version: 7, CreatedAt: time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC),
		TTFT: infoModel(t, true), TPOT: infoModel(t, false)}
}

// infoTransferModel is a prepared transfer law of two classes, same-rack
// at 40 GB/s and cross-zone at 3 GB/s.
func infoTransferModel(t *testing.T) *model.TransferModel {
	t.Helper()
	cal, err := model.NewCalibration("holdout", []float64{-0.2, 0, 0.2})
	if err != nil {
		t.Fatal(err)
	}
	m := &model.TransferModel{DefaultBytesPerToken: 160 << 10, MinMs: 0.001, MaxMs: 600000, Calibration: cal,
		Classes: []model.TransferClass{
			{Class: "same-rack", LatencyMs: 0.01, BytesPerSec: 40e9, Contention: 1, UnknownContention: 1.5,
				Tokens: model.Range{Min: 100, Max: 1024}, Samples: 300},
			{Class: "cross-zone", LatencyMs: 0.5, BytesPerSec: 3e9, Contention: 0.5, UnknownContention: 1,
				Tokens: model.Range{Min: 100, Max: 1024}, Samples: 200},
		}}
	if err := m.Prepare(); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNewInfo(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 1, 1, 0, time.UTC)

	// Before the first model: nothing ready, times null, counts still live.
	none := NewModelInfo(nil, time.Time{}, now, func(tg features.Target) (int, int) { return 10 + int(tg), 1 })
	if none.Version != 0 || none.TrainedAt != nil || none.AgeSeconds != nil || none.Pod(features.TTFT).Ready || none.Pod(features.TPOT).Ready {
		t.Errorf("no model: %+v", none)
	}
	if none.Pod(features.TTFT).TrainSamples != 10 || none.Pod(features.TPOT).TrainSamples != 11 || none.Pod(features.TPOT).HoldoutSamples != 1 {
		t.Errorf("no model: store counts %+v %+v, want the live ones", none.Pod(features.TTFT), none.Pod(features.TPOT))
	}

	b := infoBundle(t)
	loaded := now.Add(-time.Second)
	info := NewModelInfo(&bundle.Published{Bundle: b}, loaded, now, nil)
	if info.Version != 7 || info.TrainedAt != "2026-11-29T12:00:01Z" || *info.AgeSeconds != 60 ||
		info.LoadedAt != "2026-11-29T12:01:00Z" {
		t.Errorf("info %+v, want version 7 trained a minute ago", info)
	}
	for name, ti := range map[string]TargetInfo{"ttft": info.Pod(features.TTFT), "tpot": info.Pod(features.TPOT)} {
		m := b.Target(features.TTFT)
		if name == "tpot" {
			m = b.Target(features.TPOT)
		}
		// Without a store, the counts are the ones the model was trained on.
		if !ti.Ready || ti.Kind != string(m.Kind) || ti.TrainSamples != 500 || ti.HoldoutSamples != 50 ||
			len(ti.FeatureRanges) != len(m.Columns) || len(ti.LinearCoefficients) != len(m.Columns) {
			t.Errorf("%s: %+v", name, ti)
		}
	}
	if info.Pod(features.TTFT).Trees == 0 || info.Pod(features.TPOT).Trees != 0 {
		t.Errorf("trees: ttft %d, tpot %d; want some and none", info.Pod(features.TTFT).Trees, info.Pod(features.TPOT).Trees)
	}
	if _, err := json.Marshal(info); err != nil {
		t.Errorf("info does not encode: %v", err)
	}
	if info.Pod(features.TTFT).CalibrationAdjustment != nil {
		t.Errorf("adjustment %+v on a model without one", info.Pod(features.TTFT).CalibrationAdjustment)
	}
	adj := &model.LevelAdjustment{Quantile: 0.9, Level: 0.94, Samples: 321}
	b.TPOT.Calibration.Adjustment = adj
	info = NewModelInfo(&bundle.Published{Bundle: b}, loaded, now, nil)
	if got := info.Pod(features.TPOT).CalibrationAdjustment; got == nil || *got != *adj {
		t.Errorf("info shows adjustment %+v, want the model's %+v", got, adj)
	}
	if got := info.Pod(features.TPOT).CalibrationOutOfRangeAdjustment; got != nil {
		t.Errorf("out-of-range adjustment %+v on a model without one", got)
	}
	out := &model.LevelAdjustment{Quantile: 0.9, Level: 0.985, Samples: 17}
	b.TPOT.Calibration.OutOfRange = out
	info = NewModelInfo(&bundle.Published{Bundle: b}, loaded, now, nil)
	if got := info.Pod(features.TPOT).CalibrationOutOfRangeAdjustment; got == nil || *got != *out || *info.Pod(features.TPOT).CalibrationAdjustment != *adj {
		t.Errorf("info shows out-of-range adjustment %+v beside %+v, want the model's %+v beside %+v", got, info.Pod(features.TPOT).CalibrationAdjustment, out, adj)
	}
	if enc, _ := json.Marshal(info.Pod(features.TPOT)); !strings.Contains(string(enc), `"calibration_out_of_range_adjustment":{"quantile":0.9,"level":0.985,"samples":17}`) {
		t.Errorf("/model/info encodes %s", enc)
	}
}

func TestNewInfoTransfer(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 1, 1, 0, time.UTC)
	counts := func(tg features.Target) (int, int) { return 10 + int(tg), 1 }
	if none := NewModelInfo(nil, time.Time{}, now, counts); none.Transfer().Ready || none.Transfer().TrainSamples != 12 {
		t.Errorf("no model: %+v, want not ready with the store's 12 transfer samples", none.Transfer())
	}
	b := infoBundle(t)
	b.Transfer = infoTransferModel(t)
	b.Transfer.TrainSamples, b.Transfer.Holdout = 480, model.Quality{Rows: 52, MAPE: 4.5}
	ti := NewModelInfo(&bundle.Published{Bundle: b}, time.Time{}, now, nil).Transfer()
	if !ti.Ready || ti.TrainedOnSamples != 480 || ti.Holdout.MAPE != 4.5 || len(ti.Classes) != 2 ||
		ti.Classes[1].Class != "cross-zone" || ti.Classes[1].BytesPerSec != 3e9 || ti.DefaultBytesPerToken != 160<<10 {
		t.Errorf("transfer info %+v", ti)
	}
	if _, err := json.Marshal(ti); err != nil {
		t.Error(err)
	}
}

// /model/info shows a model's choice of configuration, and the widening of
// its bounds by column name; nothing for a model without them.
func TestInfoShowsSelectionAndExtrapolation(t *testing.T) {
	b := infoBundle(t)
	info := NewModelInfo(&bundle.Published{Bundle: b}, time.Time{}, b.CreatedAt, nil)
	if ti := info.Pod(features.TTFT); ti.Selection != nil || ti.Extrapolation != nil {
		t.Fatalf("model without a choice or support shows %+v, %+v", ti.Selection, ti.Extrapolation)
	}
	b.TTFT.Selection = &model.Selection{Chosen: "line", Reason: "first", TrainRows: 1000, FitRows: 600, ScoreRows: 400,
		Candidates: []model.CandidateScore{{Name: "configured", Kind: model.KindResidual, MAPE: 10.5}, {Name: "line", Kind: model.KindLinear, MAPE: 9.8}}}
	cols := b.TTFT.Columns
	b.TTFT.Support = &model.Support{SpreadUp: make([]float64, len(cols)), SpreadDown: make([]float64, len(cols)), Folds: []string{"input_token_length"}}
	j := features.MustSchema(cols...).Index("input_token_length")
	b.TTFT.Support.SpreadUp[j], b.TTFT.Support.SpreadDown[j] = 0.2, 0.05
	info = NewModelInfo(&bundle.Published{Bundle: b}, time.Time{}, b.CreatedAt, nil)
	if s := info.Pod(features.TTFT).Selection; s == nil || s.Chosen != "line" || info.Pod(features.TPOT).Selection != nil {
		t.Errorf("info selections %+v, %+v", s, info.Pod(features.TPOT).Selection)
	}
	e := info.Pod(features.TTFT).Extrapolation
	if e == nil || e.SpreadUp["input_token_length"] != 0.2 || e.SpreadDown["input_token_length"] != 0.05 ||
		len(e.MeasuredColumns) != 1 {
		t.Fatalf("extrapolation info %+v", e)
	}
}

// Every target is under its name, in the order of features.Targets, after
// the bundle's fields; the trainer's status last.
func TestModelInfoEncodesEveryTarget(t *testing.T) {
	b := infoBundle(t)
	b.Transfer = infoTransferModel(t)
	b.SplitTTFT = infoTransferModel(t)
	info := NewModelInfo(&bundle.Published{Bundle: b}, time.Time{}, b.CreatedAt, nil)
	info.Training = map[string]int{"runs": 3}
	data, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	last := strings.Index(string(data), `"xgboost_missing"`)
	for _, tg := range features.Targets {
		at := strings.Index(string(data), `"`+tg.String()+`":{"ready":true`)
		if at < last {
			t.Errorf("%s at %d, after %d: %s", tg, at, last, data)
		}
		last = at
	}
	if !strings.HasSuffix(string(data), `"training":{"runs":3}}`) {
		t.Errorf("no trainer status at the end: %s", data)
	}
	if strings.Contains(string(data), "shared_coefficients") {
		t.Errorf("laws without shared terms show some: %s", data)
	}
}

// The split-TTFT law's shared terms are in /model/info by column name.
func TestModelInfoShowsSharedTerms(t *testing.T) {
	b := infoBundle(t)
	b.SplitTTFT = infoTransferModel(t)
	b.SplitTTFT.Shared = &model.SharedTerms{Columns: []string{"effective_input_tokens", "num_request_waiting"}, MsPer: []float64{0.05, 12}}
	if err := b.SplitTTFT.Prepare(); err != nil {
		t.Fatal(err)
	}
	info := NewModelInfo(&bundle.Published{Bundle: b}, time.Time{}, b.CreatedAt, nil)
	got := info.Law(features.SplitTTFT).SharedCoefficients
	if len(got) != 2 || got["effective_input_tokens"] != 0.05 || got["num_request_waiting"] != 12 {
		t.Fatalf("shared coefficients %v", got)
	}
}
